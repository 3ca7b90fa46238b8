"""How the gates talk to a model server over its OpenAI-compatible HTTP API, and nothing
about what a gate decides: plain calls with errors mapped once (`api`), what a server offers
(`capabilities`), the neutral greedy sampling every request states (`sampling`), and the
streaming path the latency gate measures with: the native HTTP/1.1 transport (`transport`,
framed by `http1`, split into events by `sse`), its httpx fallback for TLS and proxies
(`client`), and a stream's stamped payloads turned into one typed record per request
(`events`, `finish`, `records`). It imports none of the gates (parity, latency, task).
"""
