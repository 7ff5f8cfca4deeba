import pino, { type DestinationStream, type Logger as PinoLogger } from 'pino';

/**
 * JSON logs on stdout. The kit never hands a credential to the logger; redaction is a second line
 * of defence for fields that must never be printed should someone log a request object.
 */
export function createLogger(
  level: string,
  destination?: DestinationStream,
  fields: Readonly<Record<string, unknown>> = {},
): PinoLogger {
  return pino(
    {
      level,
      // `fields`: what every line of this logger carries, such as the worker thread that wrote it.
      base: { service: 'tollgate', ...fields },
      timestamp: pino.stdTimeFunctions.isoTime,
      redact: {
        paths: [
          'req.headers.authorization',
          'headers.authorization',
          'api_secret',
          '*.api_secret',
          'token',
          '*.token',
          'secret',
          '*.secret',
        ],
        censor: '[redacted]',
      },
      formatters: { level: (label) => ({ level: label }) },
    },
    destination,
  );
}
