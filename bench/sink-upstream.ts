import http from 'node:http';

/**
 * The upstream of the RSS cases: answers every request `201 {}` and keeps nothing, so that a
 * million checkouts grow no state anywhere but in the gateway measured (the stub upstream keeps
 * every checkout it creates). PORT; listens on 127.0.0.1 only.
 */

const server = http.createServer((req, res) => {
  req.resume();
  req.once('end', () => {
    res.writeHead(201, { 'content-type': 'application/json', 'content-length': '2' });
    res.end('{}');
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
