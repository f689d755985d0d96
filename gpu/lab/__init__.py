"""The lab: the research harness beside the product (docs/architecture.md). ``eval`` runs the
studies (needles, RULER, key-token loss, the frontier and its reports), ``tools`` the
benchmarks, the advisor, the demo and the serving measurements. The product (gpu.core,
gpu.maps, gpu.data, gpu.serving, gpu.api, the presses) never imports it; the CLI dispatches to
both."""
