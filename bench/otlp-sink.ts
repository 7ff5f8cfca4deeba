import http from 'node:http';

/**
 * `node dist/bench/otlp-sink.js [port]`: an OTLP/HTTP trace receiver that accepts every export and
 * keeps nothing, for the tracing rounds of the bench (`BENCH_GATEWAY_ENV=OTEL_EXPORTER_OTLP_ENDPOINT=
 * http://127.0.0.1:<port>`). It reads each body without parsing it and answers an empty
 * `ExportTraceServiceResponse` (no bytes for protobuf, `{}` for JSON), so what it costs is a socket
 * read per export. Listens on 127.0.0.1 only, on the port given (42319 by default; PORT also works).
 * On SIGTERM or SIGINT, and every OTLP_SINK_REPORT_SECONDS (0: never) while it runs, it prints one
 * line: the exports and bytes received and its own CPU time, so the receiver's share of the
 * machine can be told apart from the gateway's.
 */

const port = Number(process.argv[2] ?? process.env.PORT ?? 42319);
const reportSeconds = Number(process.env.OTLP_SINK_REPORT_SECONDS ?? 0);
let received = 0;
let bytes = 0;
const started = process.cpuUsage();

const server = http.createServer((req, res) => {
  req.on('data', (chunk: Buffer) => {
    bytes += chunk.length;
  });
  req.once('end', () => {
    received += 1;
    const json = req.headers['content-type']?.startsWith('application/json') === true;
    res.writeHead(200, {
      'content-type': json ? 'application/json' : 'application/x-protobuf',
      'content-length': json ? '2' : '0',
    });
    res.end(json ? '{}' : undefined);
  });
});
server.keepAliveTimeout = 65_000;

function report(): void {
  const cpu = process.cpuUsage(started);
  const cpuMs = (cpu.user + cpu.system) / 1000;
  process.stdout.write(
    `otlp sink: ${received} exports, ${(bytes / 1024 / 1024).toFixed(1)} MiB, cpu ${cpuMs.toFixed(0)} ms\n`,
  );
}

server.listen(port, '127.0.0.1', () => {
  process.stdout.write(`otlp sink listening on http://127.0.0.1:${port}\n`);
});
if (reportSeconds > 0) setInterval(report, reportSeconds * 1000).unref();
for (const signal of ['SIGTERM', 'SIGINT'] as const) {
  process.once(signal, () => {
    report();
    server.close();
    server.closeAllConnections();
  });
}
