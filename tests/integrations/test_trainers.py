"""Real trainers (a tiny Hugging Face Trainer and a tiny Lightning Trainer) posting to a real
`losswatch serve`, each made to diverge by a learning-rate burst: the points arrive, the alert
comes back, and the guard stops training soon after.  Run by `make test-integrations`, which
installs torch==2.13.0, transformers and lightning."""

from __future__ import annotations

import time

import pytest

torch = pytest.importorskip("torch", reason="make test-integrations installs torch")

from tests.client_server import serving  # noqa: E402

MAX_STEPS = 200
BURST_AT = 60  # the learning rate jumps 10^35x here: the weights overflow, the loss goes Inf then NaN
STEP_SECONDS = 0.02  # a step as long as a small real model's, so the alert's latency is counted in steps
WITHIN = 100  # the guard stops training at most this many steps after the alert's step


def burst(step: int) -> float:
    return 1.0 if step < BURST_AT else 1e35


def data(n: int = 512):
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(n, 8, generator=generator)
    return x, x @ torch.linspace(-1, 1, 8).unsqueeze(1) + 0.1 * torch.randn(n, 1, generator=generator)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with serving(f"sqlite:///{tmp_path_factory.mktemp('store') / 'store.db'}") as server:
        yield server


def alerts_of(server, run: str) -> list[dict]:
    return server.get(f"/v1/runs/{run}/alerts").json()


def test_hugging_face_trainer_is_stopped_by_the_guard(server, tmp_path):
    pytest.importorskip("transformers", reason="make test-integrations installs transformers")
    pytest.importorskip("accelerate", reason="make test-integrations installs accelerate (the Trainer needs it)")
    from losswatch_client.hf import LosswatchCallback
    from transformers import Trainer, TrainerCallback, TrainingArguments

    class TwoLayers(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))

        def forward(self, x, labels):
            return {"loss": torch.nn.functional.mse_loss(self.net(x), labels)}

    class Slow(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            time.sleep(STEP_SECONDS)

    x, y = data()
    model = TwoLayers()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, burst)
    args = TrainingArguments(
        output_dir=str(tmp_path / "out"), max_steps=MAX_STEPS, per_device_train_batch_size=16, logging_steps=1,
        save_strategy="no", report_to=[], use_cpu=True, disable_tqdm=True, remove_unused_columns=False,
    )
    callback = LosswatchCallback(server.url, "hf/burst", spool_dir=str(tmp_path / "spool"), flush_interval=0.1)
    trainer = Trainer(
        model=model, args=args, train_dataset=[{"x": a, "labels": b} for a, b in zip(x, y)],
        optimizers=(optimizer, scheduler), callbacks=[Slow(), callback],
    )
    trainer.train()
    watcher = callback.watcher
    assert watcher.flush(timeout=30)

    decision = watcher.decision
    assert decision is not None, "the guard never acted"
    assert decision.alert.kind in ("nonfinite", "loss_spike", "divergence")
    print(f"HF: burst at {BURST_AT}, {decision.describe()}; stopped at {callback.stopped_at}")
    assert BURST_AT <= decision.step <= callback.stopped_at <= decision.step + WITHIN
    assert trainer.state.global_step == callback.stopped_at < MAX_STEPS  # stopped, not finished
    assert (tmp_path / "out" / f"checkpoint-{callback.stopped_at}").is_dir()  # and saved first
    assert decision.alert_id in {a["id"] for a in alerts_of(server, "hf%2Fburst")}
    losses = server.series("hf/burst", "loss")
    assert [s for s, _ in losses] == list(range(1, callback.stopped_at + 1))  # every logged step arrived
    assert {"grad_norm", "learning_rate"} <= {t["tag"] for t in server.get("/v1/runs/hf%2Fburst").json()["tags"]}
    assert server.get("/v1/runs/hf%2Fburst").json()["status"] == "finished"  # on_train_end: it ended, not crashed
    watcher.close()


def test_lightning_trainer_is_stopped_by_the_guard(server, tmp_path):
    pytest.importorskip("lightning", reason="make test-integrations installs lightning")
    import lightning.pytorch as pl
    from losswatch_client.lightning import LosswatchGuard, LosswatchLogger

    class TwoLayers(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))

        def training_step(self, batch, index):
            time.sleep(STEP_SECONDS)
            x, y = batch
            loss = torch.nn.functional.mse_loss(self.net(x), y)
            self.log("train/loss", loss, on_step=True, on_epoch=False)
            return loss

        def configure_optimizers(self):
            optimizer = torch.optim.SGD(self.parameters(), lr=0.05)
            scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, burst)
            return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}

    x, y = data()
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=16, shuffle=True)
    logger = LosswatchLogger(server.url, "lightning/burst", spool_dir=str(tmp_path / "spool"), flush_interval=0.1)
    guard = LosswatchGuard()
    trainer = pl.Trainer(
        max_steps=MAX_STEPS, logger=[logger], callbacks=[guard], log_every_n_steps=1, accelerator="cpu", devices=1,
        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
    )
    trainer.fit(TwoLayers(), loader)
    watcher = logger.watcher
    assert watcher.flush(timeout=30)

    decision = watcher.decision
    assert decision is not None, "the guard never acted"
    print(f"Lightning: burst at {BURST_AT}, {decision.describe()}; stopped at {guard.stopped_at}")
    assert BURST_AT <= decision.step <= guard.stopped_at <= decision.step + WITHIN
    assert trainer.global_step < MAX_STEPS
    assert decision.alert_id in {a["id"] for a in alerts_of(server, "lightning%2Fburst")}
    steps = [s for s, _ in server.series("lightning/burst", "train/loss")]
    assert steps == list(range(len(steps))) and len(steps) >= guard.stopped_at  # every logged step arrived
    assert server.get("/v1/runs/lightning%2Fburst").json()["status"] == "finished"  # finalize("success")
    watcher.close()

