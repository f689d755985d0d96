"""RidgeFill inside vLLM (the ``vllm`` extra): variants of vLLM's model classes whose prefill
is RidgeFill (``model``), the plugin that registers them (``plugin``), how settings reach
them (``settings``), which rows of a step are filled (``rows``) and ``ridgefill serve``
(``serve``). docs/serving.md says what is supported and how it measured."""
