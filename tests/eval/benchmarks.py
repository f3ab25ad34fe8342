"""The benchmark configs the eval tests are generated from: every conf/benchmark/*.yaml whose composed
`_target_` is an `eval.` runner (benchmarks implemented elsewhere, e.g. behavior rollouts, are tested
there), composed once as `python evaluate.py run=x benchmark=NAME benchmark.root=...` would compose it."""
from hydra import compose, initialize_config_dir

from tests.conftest import CONF


def compose_eval_benchmarks() -> dict:
    """`{config name: composed eval config}` (root `/benchmarks`, a placeholder) for the eval benchmarks."""
    names = sorted(p.stem for p in (CONF / "benchmark").glob("*.yaml"))
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfgs = {n: compose(config_name="eval", overrides=[f"benchmark={n}", "run=x", "++benchmark.root=/benchmarks"])
                for n in names}
    return {n: cfg for n, cfg in cfgs.items() if str(cfg.benchmark.get("_target_", "")).startswith("eval.")
            and not cfg.benchmark.get("generator")}  # generated benchmarks (mini_*): tests/eval/test_mini_benchmarks.py


EVAL_CONFIGS = compose_eval_benchmarks()
EVAL_BENCHMARKS = sorted(EVAL_CONFIGS)
