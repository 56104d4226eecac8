"""What the tests and the benchmarks both run: servers, kits and a throwaway project, imported by
qualified name (``from testkit.harness import Project``). Not part of the package (pyproject.toml
ships llm_serving, components, providers and contract only).

- ``harness``: a throwaway copy of the project with one stack, on the real engine and the simulated
  cluster (tests/integration, tests/faults, bench/cluster.py);
- ``hf_server`` (the puller's `hf` client and generated model files; the Hub stand-in itself is
  scripts/localmodel/hub_server.py), ``s3_server``, ``busybox``: an S3 store for the
  pullers, and the image's shell (tests/puller, tests/streamer, bench's puller benchmarks);
- ``stargate``, ``fake_engine``: the real Stargate router, backend router and pylon on loopback,
  before fake OpenAI engines (tests/conformance, tests/engine, bench/gateway.py, bench/concurrency.py);
- ``nginx_kit``, ``fake_router``, ``dns_responder``: the rendered gateway on a real nginx + njs, a
  stand-in router, a DNS responder (tests/gateway, bench/gateway*.py, bench/wake.py);
- ``keda_operator``, ``prometheus_standin``: the real KEDA operator on the simulated cluster and a
  stand-in Prometheus (tests/integration, bench/wake.py);
- ``ports``: a free loopback port and the host's address.

It imports nothing of tests/ (tests/test_testkit.py checks it, and that bench/ imports no test
module): what a benchmark needs lives here, so a test's refactor cannot break a benchmark.
"""
