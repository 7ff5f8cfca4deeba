/**
 * Jest's setup for every test file: the gateway apps and admin apps a test makes compare their
 * answers with the API description (`openapi/tollgate-admin.json`), a mismatch answering
 * `500 internal_error`, so a test that receives an answer the description does not allow fails.
 * Gateway processes the tests start inherit the same setting (`childEnv`, the multiprocess
 * harness).
 */
import { ANSWER_CHECKS_VARIABLE } from '../../gateway/openapi/answer-check';

process.env[ANSWER_CHECKS_VARIABLE] = '1';
