"""How RidgeFill's settings reach vLLM (gpu.serving.settings) and ``ridgefill serve``'s checks,
all before any vLLM process starts: the settings survive the trip through hf_overrides
unchanged, what the vLLM path does not run is refused naming the flag (in the CLI, and where
vLLM builds the model class), the served command keeps vLLM's defaults, and the plugin
registers nothing under a vLLM other than the one it was written for."""
from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from gpu import cli
from gpu.core import models
from gpu.core.config import PrefillConfig
from gpu.serving import serve, settings
from gpu.serving.rows import MIN_FILL_ROWS

from gpu_fixtures import tiny_dir


def test_overrides_round_trip(tmp_path):
    folder = tiny_dir("llama")
    config = PrefillConfig(fill="kv", values_fill="identity", split=2, tail=3, rows="none")
    maps = tmp_path / "m.safetensors"
    hf = settings.overrides(folder, config, maps)
    assert hf["architectures"] == ["RidgeFillLlamaForCausalLM"]
    back, path, rows = settings.read(SimpleNamespace(**json.loads(json.dumps(hf))))
    assert back == config and path == str(maps.resolve()) and rows == MIN_FILL_ROWS
    hf = settings.overrides(folder, config, maps, min_fill_rows=7)
    assert settings.read(SimpleNamespace(**json.loads(json.dumps(hf))))[2] == 7
    assert settings.overrides(folder, PrefillConfig(fill="exact"), None) == {}


@pytest.mark.parametrize("change, flag", [
    ({"rows": "lexical"}, "--rows none"), ({"rescale": "values"}, "--rescale"),
    ({"fill": "none"}, "--fill identity"), ({"compile": True}, "--compile")])
def test_what_the_vllm_path_does_not_run_is_refused_by_name(change, flag):
    config = PrefillConfig(**{"fill": "identity", "split": 2, "rows": "none", **change})
    with pytest.raises(ValueError, match=flag):
        settings.check(config)


def test_other_families_and_two_map_files_are_refused(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "gemma3_text"}))
    with pytest.raises(ValueError, match="gemma3_text.*--fill exact"):
        settings.model_type(tmp_path)
    two = PrefillConfig(fill="ridge", values_fill="kv", split=2, rows="none")
    with pytest.raises(ValueError, match="two map files"):
        settings.overrides(tiny_dir("llama"), two, tmp_path / "m.safetensors")


def test_serve_command_keeps_vllms_defaults():
    """Prefix caching and chunked prefill stay as stock vLLM has them (nothing turns them off,
    no step budget is forced); the settings ride in --hf-overrides."""
    folder = tiny_dir("llama")
    argv, summary = serve.command(str(folder), fill="identity", split=2, tail=1)
    hf = json.loads(argv[argv.index("--hf-overrides") + 1])
    assert hf["ridgefill"]["config"]["split"] == 2 and hf["ridgefill"]["maps"] is None
    assert hf["ridgefill"]["min_fill_rows"] == MIN_FILL_ROWS
    assert not [a for a in argv if "prefix-caching" in a or "chunked-prefill" in a
                or "max-num-batched-tokens" in a or "max-model-len" in a]
    long, _ = serve.command(str(folder), fill="identity", split=2, max_model_len=32768,
                            extra=("--enable-prefix-caching",))
    assert long[long.index("--max-model-len") + 1] == "32768" and long[-1] == "--enable-prefix-caching"
    assert "identity" in summary and "split 2" in summary
    stock, _ = serve.command(str(folder), fill="exact")
    assert "--hf-overrides" not in stock


def test_a_tiered_server_keeps_vllms_step_budget():
    """rows='attention' is served with vLLM's defaults too (a chunked prompt is ranked when its
    end arrives: gpu.serving.tiered); the selector options ride in --hf-overrides, and an
    option the vLLM path does not read is refused naming it."""
    folder = tiny_dir("llama")
    tiered = {"fill": "identity", "split": 2, "tail": 1, "rows": "attention",
              "selector_options": {"share": 0.2, "complete": True}}
    argv, summary = serve.command(str(folder), **tiered)
    assert not [a for a in argv if "max-num-batched-tokens" in a or "chunked-prefill" in a]
    hf = json.loads(argv[argv.index("--hf-overrides") + 1])
    assert hf["ridgefill"]["config"]["selector_options"] == {"share": 0.2, "complete": True}
    assert "rows attention complete=True share=0.2" in summary
    with pytest.raises(ValueError, match="drop blind"):
        serve.command(str(folder), **{**tiered, "selector_options": {"blind": True}})


def test_the_default_dtype_is_the_processors_fast_one(monkeypatch):
    amx = "model name\t: X\nflags\t\t: avx2 avx512f amx_bf16\n"
    avx2 = "model name\t: Y\nflags\t\t: avx2 fma\n"
    assert settings.default_dtype(amx) == "bfloat16"
    assert settings.default_dtype("model name\t: Z\nflags\t\t: avx512f avx512_bf16\n") == "bfloat16"
    assert settings.default_dtype(avx2) == settings.default_dtype("") == "float32"
    folder = tiny_dir("llama")
    for info, want in ((amx, "bfloat16"), (avx2, "float32")):
        monkeypatch.setattr(settings, "cpu_info", lambda _=None, i=info: models.cpu_info(i))
        argv, summary = serve.command(str(folder), fill="identity", split=2, tail=1)
        assert argv[argv.index("--dtype") + 1] == want and want in summary
    argv, _ = serve.command(str(folder), dtype="bfloat16", fill="exact")  # a given dtype wins
    assert argv[argv.index("--dtype") + 1] == "bfloat16"


@pytest.mark.parametrize("args, says", [
    (["--fill", "identity", "--split", "99"], "--split 99 is outside"),
    (["--fill", "kv", "--split", "2"], "needs maps: give --maps"),
    (["--fill", "ridge", "--rows", "probe"], "--rows none")])
def test_bad_settings_stop_before_the_server_starts(args, says, capsys):
    assert cli.main(["serve", "--model", str(tiny_dir("llama")), *args]) == 2
    err = capsys.readouterr().err
    assert says.replace("--split 99", "split=99") in err or says in err
    assert "Traceback" not in err


def _engine(**change):
    """A stand-in for vLLM's VllmConfig with the fields check_engine reads: stock (CPU,
    one rank, no draft model, automatic backend, no window) unless ``change`` says."""
    hf = SimpleNamespace(use_sliding_window=change.pop("window", False),
                         layer_types=change.pop("layer_types", None))
    return SimpleNamespace(
        parallel_config=SimpleNamespace(pipeline_parallel_size=change.pop("pp", 1),
                                        data_parallel_size=change.pop("dp", 1),
                                        tensor_parallel_size=change.pop("tp", 1)),
        model_config=SimpleNamespace(hf_text_config=hf, runner_type=change.pop("runner", "generate")),
        lora_config=change.pop("lora", None),
        attention_config=SimpleNamespace(backend=change.pop("backend", None)),
        speculative_config=change.pop("spec", None),
        device_config=SimpleNamespace(device_type=change.pop("device", "cpu")))


@pytest.mark.parametrize("change, says", [
    ({"spec": object()}, "speculative decoding"),
    ({"pp": 2}, "pipeline parallelism"),
    ({"dp": 2}, "data parallelism"),
    ({"backend": SimpleNamespace(name="FLASH_ATTN")}, "attention backend"),
    ({"window": True}, "sliding window"),
    ({"layer_types": ["full_attention", "sliding_attention"]}, "sliding window"),
    ({"lora": object()}, "LoRA adapters"),
    ({"runner": "pooling"}, "a runner other than generate"),
    ({"device": "cuda"}, "device")])
def test_engine_modes_the_classes_cannot_run_are_refused_at_build(change, says):
    settings.check_engine(_engine(tp=2, backend=SimpleNamespace(name="CPU_ATTN")))  # these run
    with pytest.raises(ValueError, match=f"does not run {says}"):
        settings.check_engine(_engine(**change))


def test_register_refuses_another_vllm_by_name(monkeypatch, caplog):
    import vllm
    from vllm import ModelRegistry

    from gpu.serving import plugin

    with pytest.raises(RuntimeError, match="written for vllm 0.32.0 and found vllm 9.9"):
        settings.check_version("9.9")
    registered = []
    monkeypatch.setattr(ModelRegistry, "register_model", lambda *a: registered.append(a))
    monkeypatch.setattr(ModelRegistry, "get_supported_archs", lambda: [])
    monkeypatch.setattr(vllm, "__version__", "9.9")
    with caplog.at_level("WARNING", logger="ridgefill"):
        plugin.register()
    assert registered == [] and "found vllm 9.9" in caplog.text
    monkeypatch.setattr(vllm, "__version__", settings.VLLM_VERSION)
    plugin.register()
    assert sorted(name for name, _ in registered) == sorted(
        settings.PREFIX + a for a in settings.ARCHITECTURES.values())


def test_thread_binding_gives_each_tensor_parallel_rank_its_cores(monkeypatch):
    monkeypatch.setattr(settings.os, "sched_getaffinity", lambda _: {0, 1, 2, 3})
    assert settings.all_cores() == "0,1,2,3"
    assert settings.all_cores(2) == "0,1|2,3"
    assert settings.all_cores(4) == "0|1|2|3"
    with pytest.raises(ValueError, match="needs at least 8 cores"):
        settings.all_cores(8)
    assert settings.ranks_of(("--tensor-parallel-size", "2")) == 2
    assert settings.ranks_of(["-tp=2", "--x"]) == 2 and settings.ranks_of([]) == 1
