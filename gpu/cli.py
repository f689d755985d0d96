"""The ``ridgefill`` command line: fit, generate, serve, demo, eval, bench, advise."""
from __future__ import annotations

import argparse
import contextlib
import json
import logging
import sys
from pathlib import Path

import re
from dataclasses import MISSING, fields

from .version import __version__
from .core.advised import ADVISABLE, DEMO_MODEL
from .maps.fit_options import FitOptions
from .core.config import PrefillConfig
from .core.models import BUILTINS, DTYPES
from .lab.eval.options import FrontierOptions, MiniOptions, StudyOptions
from .lab.tools.advise_options import AdviseOptions
from .lab.tools.bench_options import BenchOptions
from .data.corpus import FetchError

RESUME = ("Journaled and resumable: rerunning the command resumes it. `kill -USR1 PID` stops it "
          "once the running sample is journaled; SIGTERM or Ctrl-C stops it at once (that "
          "sample is measured again on the rerun).")


def _model_args(p: argparse.ArgumentParser) -> None:
    _model_arg(p)
    p.add_argument("--device", default=None, help="cpu or cuda (default: cuda when present)")
    p.add_argument("--dtype", choices=tuple(DTYPES), default=None,
                   help="weights' precision (default: fp32 on the CPU, bf16 on CUDA)")


def _model_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default=DEMO_MODEL,
                   help=f"built-in name ({', '.join(BUILTINS)}) or a local HF model folder "
                        f"(default {DEMO_MODEL}, the demo's)")


def _dtype(name: str | None):
    import torch

    return None if name is None else getattr(torch, DTYPES[name])


def flag(name: str) -> str:
    """The CLI flag of a PrefillConfig field: ``tail`` -> ``--tail``."""
    return "--" + name.replace("_", "-")


def _option(text: str) -> tuple[str, object]:
    """``KEY=VALUE`` of --selector-options, the value read as JSON when it parses (numbers,
    true/false), else as a string."""
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"{text!r}: write selector options as KEY=VALUE, "
                                         "e.g. count=50 or complete=true")
    try:
        return key, json.loads(value)
    except json.JSONDecodeError:
        return key, value


def _prefill_args(p: argparse.ArgumentParser) -> None:
    """One flag per PrefillConfig field, with the field's name, choices and (in its help) its
    default. Flags left out stay out of the namespace, so the model's own defaults
    (gpu.core.advised) apply to them."""
    p.add_argument("--maps", help="map file from `ridgefill fit`")
    for f in fields(PrefillConfig):
        meta, default = dict(f.metadata), f.default
        assert default is not MISSING, f.name
        advised = ", or the built-in model's advised value" if f.name in ADVISABLE else ""
        shown = "" if default is None else f" (default {default}{advised})"
        if isinstance(default, bool):
            p.add_argument(flag(f.name), action=argparse.BooleanOptionalAction,
                           default=argparse.SUPPRESS, help=meta["help"])
        elif f.name == "selector_options":
            p.add_argument(flag(f.name), nargs="+", type=_option, default=argparse.SUPPRESS,
                           metavar="KEY=VALUE", help=meta["help"])
        else:
            kind = int if "int" in str(f.type) else str
            p.add_argument(flag(f.name), type=kind, default=argparse.SUPPRESS,
                           choices=meta.get("choices"), help=meta["help"] + shown)


def options_args(p: argparse.ArgumentParser, cls) -> None:
    """One flag per field of an options dataclass (gpu.lab.tools.advise.AdviseOptions, ...), with
    the field's default and help: the flags cannot drift from the library's defaults. A
    field without help (gpu.core.config.option) has no flag."""
    for f in fields(cls):
        if "help" not in f.metadata:
            continue
        t, default, h = str(f.type), f.default, f.metadata["help"]
        shown = h + ("" if default in (None, ()) or isinstance(default, bool)
                     else f" (default {' '.join(map(str, default)) if isinstance(default, tuple) else default})")
        if t == "bool":
            p.add_argument(flag(f.name), action=argparse.BooleanOptionalAction, default=default,
                           help=h)
        elif t.startswith("tuple[tuple[str"):
            p.add_argument(flag(f.name), nargs="+", type=_option, default=default,
                           metavar="KEY=VALUE", help=shown)
        elif t.startswith("tuple["):
            item = int if "int" in t else float if "float" in t else str
            p.add_argument(flag(f.name), nargs="+", type=item, default=default,
                           choices=f.metadata.get("choices"), help=shown)
        else:
            kind = Path if t.startswith("Path") else int if t.startswith("int") else str
            p.add_argument(flag(f.name), type=kind, default=default,
                           choices=f.metadata.get("choices"), help=shown,
                           required=f.metadata.get("required", False))


def options_from_args(a: argparse.Namespace, cls):
    """The options dataclass the parsed flags of :func:`options_args` describe."""
    return cls(**{f.name: tuple(v) if isinstance(v := getattr(a, f.name), list) else v
                  for f in fields(cls) if "help" in f.metadata})


def settings_from_args(a: argparse.Namespace) -> dict:
    """The PrefillConfig fields the parsed prefill flags set (only those given)."""
    return {f.name: (dict(getattr(a, f.name)) if f.name == "selector_options"
                     else getattr(a, f.name)) for f in fields(PrefillConfig) if hasattr(a, f.name)}


def _flags_named(message: str) -> str:
    """A library error message with its parameter names (``tail=``) written as CLI flags."""
    names = "|".join(f.name for f in fields(PrefillConfig))
    return re.sub(rf"\b({names})=", lambda m: flag(m.group(1)) + " ", message)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ridgefill",
        description="RidgeFill: training-free late-layer cache fill for faster prefill.")
    parser.add_argument("--version", action="version", version=f"ridgefill {__version__}")
    parser.add_argument("--quiet", dest="quiet_logs", action="store_true",
                        help="no informational lines on stderr (maps found or fitted, advice "
                             "applied: the ridgefill logger's info); warnings still show")
    sub = parser.add_subparsers(dest="command")

    f = sub.add_parser("fit", help="fit ridge maps for one or more splits (paper 2.2)")
    _model_args(f)
    options_args(f, FitOptions)
    f.set_defaults(func=_cmd_fit)

    g = sub.add_parser("generate", help="RidgeFill prefill, then ordinary decoding")
    _model_args(g)
    _prefill_args(g)
    src = g.add_mutually_exclusive_group(required=True)
    src.add_argument("--prompt", help="prompt text")
    src.add_argument("--prompt-file", type=Path, help="file holding the prompt text")
    g.add_argument("--question", default="", help="question appended at the end of the prompt")
    g.add_argument("--chat", action="store_true", help="wrap the prompt in the chat template")
    g.add_argument("--answer-prefix", default="",
                   help="text the answer starts with (base models, as RULER prefills it)")
    g.add_argument("--max-new-tokens", type=int, default=32)
    g.add_argument("--json", action="store_true", help="print a JSON record")
    g.set_defaults(func=_cmd_generate)

    s = sub.add_parser("serve", help="vLLM's OpenAI-compatible server with a RidgeFill prefill "
                                     "(the vllm extra; docs/serving.md)")
    _model_arg(s)
    _prefill_args(s)
    s.add_argument("--port", type=int, default=8000)
    s.add_argument("--host", default="127.0.0.1")
    s.add_argument("--dtype", choices=tuple(DTYPES), default=None,
                   help="vLLM's weights and activations (default: bf16 on a CPU with "
                        "avx512_bf16 or amx_bf16, vLLM's fast path there; else fp32)")
    s.add_argument("--max-model-len", type=int, default=None,
                   help="longest prompt plus answer (default: the model's own context length; "
                        "long prompts are prefilled in chunks, as stock vLLM does)")
    s.add_argument("vllm_args", nargs=argparse.REMAINDER,
                   help="after --: flags passed to `vllm serve` unchanged")
    s.set_defaults(func=_cmd_serve)

    d = sub.add_parser("demo", help="answer a needle prompt both ways: stock vLLM against "
                                    "RidgeFill in vLLM, or exact against RidgeFill")
    _model_args(d)
    d.add_argument("--out-dir", type=Path, default=Path("out/demo"))
    d.add_argument("--engine", choices=("auto", "vllm", "transformers"), default="auto",
                   help="vllm: stock vLLM against RidgeFill inside vLLM (where vLLM has its "
                        "bf16 fast path); transformers: the project's engine, exact against "
                        "RidgeFill in fp32; auto: vllm where it can run, else transformers")
    d.set_defaults(func=_cmd_demo)

    b = sub.add_parser("bench", help="time to first token: exact vs RidgeFill, alternating")
    options_args(b, BenchOptions)
    b.set_defaults(func=_cmd_bench)

    e = sub.add_parser("eval", help="evaluation: needles, long-document loss, agreement")
    e.set_defaults(func=_cmd_eval)
    studies = e.add_subparsers(dest="what", metavar="{study,mini,frontier}")
    for what, cls, text in (("study", StudyOptions, "the paper's study on each model's preset"),
                            ("mini", MiniOptions, "every instrument once on a tiny model"),
                            ("frontier", FrontierOptions, "split x tail x rows x fill grid")):
        w = studies.add_parser(what, help=text, epilog=RESUME)
        options_args(w, cls)
        w.add_argument("--threads", type=int, help="torch CPU threads (default: torch's choice)")
        w.add_argument("--quiet", action="store_true", help="no progress bars")
    v = sub.add_parser("advise", help="choose split, tail and rows for a model (paper 9, "
                                      "steps 2-5): a small frontier on held-out text")
    _model_args(v)
    options_args(v, AdviseOptions)
    v.add_argument("--threads", type=int, help="torch CPU threads")
    v.add_argument("--quiet", action="store_true", help="no progress bars")
    v.set_defaults(func=_cmd_advise)
    return parser


def _cmd_advise(a) -> int:
    import torch
    from .lab.tools.advise import run

    if a.threads:
        torch.set_num_threads(a.threads)
    run(a.model, options_from_args(a, AdviseOptions), device=a.device, dtype=_dtype(a.dtype),
        progress=not a.quiet)
    return 0


def _cmd_eval(a) -> int:
    import torch

    from .lab.eval import frontier, harness
    what = a.what or "study"
    if getattr(a, "threads", None):
        torch.set_num_threads(a.threads)  # on a shared CPU, 1 thread is often fastest
    progress = not getattr(a, "quiet", False)
    harness.stop_on_sigterm()  # a stopped run still writes its partial report
    if what == "frontier":
        frontier.run(options_from_args(a, FrontierOptions), progress=progress)
        return 0
    if what == "mini":
        rep = harness.run_mini(options_from_args(a, MiniOptions), progress)
        print(f"mini eval: {rep['counts']['records']} records -> "
              f"{Path(a.out_dir) / rep['model']}/report.md")
        return 0
    return harness.run(options_from_args(a, StudyOptions) if a.what else StudyOptions(), progress)


def _cmd_fit(a) -> int:
    from .core import models
    from .core.advised import default_split
    from .maps.fit import check_options, fit, output_path, rank_device

    loaded = models.load(a.model, device=rank_device(a.device), dtype=_dtype(a.dtype))
    opts = options_from_args(a, FitOptions)
    if not opts.splits:
        opts.splits = (default_split(loaded.name, loaded.n_layers),)
    check_options(opts, loaded.n_layers)
    for split in fit(loaded, opts):
        for kind in opts.kinds:
            path = output_path(opts.out, split, len(opts.splits), kind, opts.kinds)
            meta = json.loads(path.with_suffix(".json").read_text())
            cos = meta["heldout"]["cosine"]
            k = sum(v["keys"] for v in cos.values()) / len(cos)
            v = sum(v["values"] for v in cos.values()) / len(cos)
            lam = meta["lambda"]
            lam = f"{lam:.3g}" if not isinstance(lam, dict) else (
                f"{min(lam.values()):.3g}..{max(lam.values()):.3g} per layer")
            print(f"split {split} ({kind}): lambda {lam}, held-out cache-write cosine keys "
                  f"{k:.3f} values {v:.3f}, {meta['calibration']['rows']} rows -> {path}")
    return 0


def _cmd_serve(a) -> int:
    from .serving.serve import become_vllm, command

    extra = tuple(x for x in a.vllm_args if x != "--")
    dtype = DTYPES[a.dtype] if a.dtype else None
    argv, summary = command(a.model, a.maps, a.port, a.host, dtype, a.max_model_len, extra,
                            **settings_from_args(a))
    print(f"ridgefill serve: {summary}; http://{a.host}:{a.port}/v1", flush=True)
    become_vllm(argv, extra)
    return 0


def _cmd_demo(a) -> int:
    from .lab.tools.demo import run

    return run(a.model, a.device, a.out_dir, engine=a.engine)


def _cmd_bench(a) -> int:
    opts = options_from_args(a, BenchOptions)
    if opts.engine == "vllm":
        from .lab.tools.bench_vllm import run as run_vllm
        return run_vllm(opts)
    from .lab.tools.bench import run
    return run(opts)


def _read_prompt(a) -> str:
    if a.prompt is not None:
        return a.prompt
    try:
        return a.prompt_file.read_text()
    except OSError as e:
        raise ValueError(f"cannot read --prompt-file {a.prompt_file}: {e.strerror}") from None


def _cmd_generate(a) -> int:
    from .api import RidgeFill
    from .core.advised import ADVISED, advice_source, default_config

    rf = RidgeFill.load(a.model, a.maps, device=a.device, dtype=_dtype(a.dtype),
                        **settings_from_args(a))
    c, name = rf.config, rf.loaded.name
    advised = name in ADVISED and default_config(name) == c
    print(f"[{name}: " + ("exact prefill" if c.fill == "exact" else
          f"keys {c.fill}, values {c.values_fill or c.fill}, split {c.split}, tail {c.tail}, "
          f"rows {c.rows}") + (f"; advised: {advice_source(name)}" if advised else "") + "]",
          file=sys.stderr)
    r = rf.generate(_read_prompt(a), a.question, chat=a.chat, max_new_tokens=a.max_new_tokens,
                    answer_prefix=a.answer_prefix)
    r.notes = [_flags_named(n) for n in r.notes]
    if a.json:
        print(json.dumps(r.to_dict(), indent=2))
    else:
        for note in r.notes:
            print(f"note: {note}", file=sys.stderr)
        print(r.text)
        print(f"[{r.prompt_tokens} prompt tokens: {r.filled} filled, {r.exact_prefix} exact "
              f"prefix, {r.tail} tail; time to first token {r.ttft_seconds:.2f} s; "
              f"decode {r.decode_tokens_per_second:.1f} tok/s]", file=sys.stderr)
    return 0


@contextlib.contextmanager
def log_to_stderr(quiet: bool = False):
    """While the command runs, the library's messages (the ``ridgefill`` logger) go to stderr,
    one plain line each: info and up, or warnings only when ``quiet``. The logger's level and
    handlers are restored afterwards (a program that calls :func:`main` keeps its own)."""
    log = logging.getLogger("ridgefill")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(message)s"))
    level = log.level
    log.addHandler(handler)
    log.setLevel(logging.WARNING if quiet else logging.INFO)
    try:
        yield
    finally:
        log.removeHandler(handler)
        log.setLevel(level)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    a = parser.parse_args(argv)
    if a.command is None:
        parser.print_help()
        return 0
    with log_to_stderr(a.quiet_logs):
        return _run(a)


def _run(a: argparse.Namespace) -> int:
    """The subcommand ``a`` names; the errors a user can fix end in one line, status 2."""
    try:
        return a.func(a)
    except (ValueError, FileNotFoundError, ModuleNotFoundError, FetchError) as e:
        print(f"ridgefill {a.command}: error: {_flags_named(str(e))}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
