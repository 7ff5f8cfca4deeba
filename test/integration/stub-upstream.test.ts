import { startStubUpstream } from '../../gateway/stub-upstream';

/** The bundled stub answers HEAD like GET, as the gateway's `Allow` headers promise. */
describe('the stub upstream', () => {
  it('answers HEAD on a GET route with the GET status and no body', async () => {
    const { server, url } = await startStubUpstream();
    try {
      const headers = { 'x-gateway-account-id': 'acct_a', 'x-gateway-key-id': 'key_a' };
      const head = await fetch(`${url}/api/v1/wallets/`, { method: 'HEAD', headers });
      const get = await fetch(`${url}/api/v1/wallets/`, { headers });
      expect(get.status).toBe(200);
      expect(head.status).toBe(get.status);
      expect(await head.text()).toBe('');
    } finally {
      server.closeAllConnections();
      await new Promise<void>((resolve) =>
        server.close(() => {
          resolve();
        }),
      );
    }
  });
});
