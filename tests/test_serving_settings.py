"""How RidgeFill's settings reach vLLM (gpu.serving.settings) and ``ridgefill serve``'s checks,
all before any vLLM process starts: the settings survive the trip through hf_overrides
unchanged, what the vLLM path does not run is refused naming the flag, and the served
command carries the engine arguments the path needs."""
from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from gpu import cli
from gpu.core import models
from gpu.core.config import PrefillConfig
from gpu.serving import serve, settings

from gpu_fixtures import tiny_dir


def test_overrides_round_trip(tmp_path):
    folder = tiny_dir("llama")
    config = PrefillConfig(fill="kv", values_fill="identity", split=2, tail=3, rows="none")
    maps = tmp_path / "m.safetensors"
    hf = settings.overrides(folder, config, maps)
    assert hf["architectures"] == ["RidgeFillLlamaForCausalLM"]
    back, path = settings.read(SimpleNamespace(**json.loads(json.dumps(hf))))
    assert back == config and path == str(maps.resolve())
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


def test_serve_command_carries_the_engine_arguments():
    folder = tiny_dir("llama")
    argv, summary = serve.command(str(folder), fill="identity", split=2, tail=1)
    hf = json.loads(argv[argv.index("--hf-overrides") + 1])
    assert hf["ridgefill"]["config"]["split"] == 2 and hf["ridgefill"]["maps"] is None
    assert "--no-enable-prefix-caching" in argv and "--no-enable-chunked-prefill" in argv
    assert argv[argv.index("--max-num-batched-tokens") + 1] == argv[argv.index("--max-model-len") + 1]
    assert "identity" in summary and "split 2" in summary
    stock, _ = serve.command(str(folder), fill="exact")
    assert "--hf-overrides" not in stock


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
    (["--fill", "identity", "--split", "2", "--", "--enable-prefix-caching"],
     "--enable-prefix-caching: RidgeFill plans each prompt"),
    (["--fill", "ridge", "--rows", "probe"], "--rows none")])
def test_bad_settings_stop_before_the_server_starts(args, says, capsys):
    assert cli.main(["serve", "--model", str(tiny_dir("llama")), *args]) == 2
    err = capsys.readouterr().err
    assert says.replace("--split 99", "split=99") in err or says in err
    assert "Traceback" not in err
