"""The product core: what a RidgeFill prefill needs and nothing else (paper sections 2.1-2.4).

``config`` (the one frozen PrefillConfig), ``plan`` (split, tail, exact rows), ``prompt``,
``models`` (loading) and ``adapters`` (one per architecture family), ``select`` (exact-row
selectors), ``engine`` (orchestration), ``late`` (the per-layer late fill), ``attention``
(masked attention kernels) and ``cache`` (cache helpers and decoding). Imports nothing from
``gpu.maps.fit``, ``gpu.data``, ``gpu.lab.eval`` or ``gpu.lab.tools``.
"""
