"""`env=metaworld_mt50`: composes, names the 50 Meta-World v3 tasks (those of metaworld's MT50 benchmark), each with
a scripted expert; no demonstrations are collected."""
from behavior.metaworld import MT10, MT50, SUITES, task_names
from tests.conftest import compose_cfg


def test_mt50_env_config_composes_with_50_tasks_that_have_experts():
    from metaworld.policies import ENV_POLICY_MAP

    cfg = compose_cfg("task=behavior", "env=metaworld_mt50")
    assert cfg.env.name == "metaworld_mt50" and cfg.env.tasks == "mt50"
    assert (cfg.env.eval_seed, cfg.env.horizon) == (1000, 500)
    assert (cfg.env.dataset.episodes_per_task, cfg.env.dataset.seed, cfg.env.dataset.workers) == (50, 0, 1)
    names = task_names(cfg.env.tasks)
    assert names == MT50 == SUITES["mt50"] and len(set(names)) == 50
    assert set(MT10) <= set(names)
    assert [t for t in names if t not in ENV_POLICY_MAP] == []
    assert cfg.run.name_parts[1] == "metaworld_mt50"  # the run is named after the env


def test_mt50_list_is_metaworlds_own():
    import metaworld

    assert sorted(MT50) == sorted(metaworld.ML1.ENV_NAMES)  # the MT50 benchmark's train classes are the same 50
