import { sanityCheck } from '../checks';
import type { Fixture } from '../fixture';
import { TARGETS } from '../labels';

/** `memory`: (b) the gateway with in-memory limits, with a secret key and with a token. */
export async function runMemory(fixture: Fixture): Promise<void> {
  const { bench, scripts } = fixture;
  const { url, gateway } = await fixture.startGateway(TARGETS.memory, {}, 'memory');
  await sanityCheck(url, fixture.first);
  await bench.measure(TARGETS.memory, 'secret key', url, scripts.secret);
  await bench.measure(TARGETS.memory, 'token', url, scripts.token);
  bench.recordMemory(TARGETS.memory, gateway);
  await gateway.stop();
}
