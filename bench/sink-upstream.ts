import http from 'node:http';

/**
 * The upstream of the RSS cases: answers every request `201 {}` and keeps nothing, so that a
 * million checkouts grow no state anywhere but in the gateway measured (the stub upstream keeps
 * every checkout it creates). PORT; listens on 127.0.0.1 only. SINK_DELAY_MS (0) holds every
 * answer that long: a request with an Idempotency-Key is then still in flight when its retry comes.
 */

const delayMs = Number(process.env.SINK_DELAY_MS ?? 0);
const answer = (res: http.ServerResponse): void => {
  res.writeHead(201, { 'content-type': 'application/json', 'content-length': '2' });
  res.end('{}');
};
const server = http.createServer((req, res) => {
  req.resume();
  req.once('end', () => {
    if (delayMs > 0)
      setTimeout(() => {
        answer(res);
      }, delayMs);
    else answer(res);
  });
});
server.keepAliveTimeout = 65_000;
const port = Number(process.env.PORT ?? 8093);
server.listen(port, '127.0.0.1', () => {
  console.log(`sink upstream listening on http://127.0.0.1:${port}`);
});
process.once('SIGTERM', () => {
  server.close();
  server.closeIdleConnections();
});
