"""Tracking in a training run: MLflow gets the run's params, metrics, config.yaml and results.json (artifacts
beside the runs, not in the working directory); `logger=wandb` fails clearly when its package is missing."""

import importlib.util

import pytest

from core.run import train

ONE_PHASE = ("stage=single_stage", "stage.phases.finetune.global_batch_size=4")


def test_mlflow_run_gets_config_and_results_artifacts(small_cfg, tmp_path, monkeypatch):
    from mlflow.tracking import MlflowClient

    monkeypatch.chdir(tmp_path)  # MLflow's default artifact store would be ./mlruns: it must not be used
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    train(small_cfg(*ONE_PHASE, "logger=mlflow", f"logger.mlflow.tracking_uri={uri}", "trainer.max_steps=2", "run.name=tracked",
                    "trainer.threads=1"))
    run_dir = tmp_path / "runs" / "tracked"
    client = MlflowClient(tracking_uri=uri)
    run_id = (run_dir / "mlflow_run_id").read_text()
    assert {a.path for a in client.list_artifacts(run_id)} >= {"config.yaml", "results.json"}
    assert (tmp_path / "runs" / "mlartifacts" / run_id / "artifacts" / "config.yaml").exists()
    assert not (tmp_path / "mlruns").exists()  # artifacts live beside the runs, not in the working directory
    run = client.get_run(run_id)
    assert run.data.params["trainer.max_steps"] == "2" and "train/loss" in run.data.metrics


@pytest.mark.skipif(importlib.util.find_spec("wandb") is not None, reason="wandb is installed")
def test_wandb_without_its_package_fails_with_the_install_command(small_cfg):
    with pytest.raises(ImportError, match=r"pip install -e \"\.\[wandb\]\""):
        train(small_cfg(*ONE_PHASE, "logger=wandb", "trainer.max_steps=1", "run.name=wb"))
