"""A real Keras 3 `fit` (on the torch backend) posting to a real `losswatch serve` through
`losswatch_client.keras.LosswatchCallback`: each batch's own loss arrives (not Keras's running
mean of the epoch), and an LR burst's alert stops training.  Run by `make test-integrations`,
which installs torch==2.13.0 and keras."""

from __future__ import annotations

import os
import time

import pytest

os.environ.setdefault("KERAS_BACKEND", "torch")  # before keras is first imported
pytest.importorskip("torch", reason="make test-integrations installs torch")
keras = pytest.importorskip("keras", reason="make test-integrations installs keras")

import numpy as np  # noqa: E402

from tests.client_server import serving  # noqa: E402

STEPS_PER_EPOCH = 32  # 512 samples in batches of 16
BURST_AT = 70  # the learning rate jumps 10^35x here (in the third epoch): the loss goes Inf then NaN
WITHIN = 100  # the guard stops training at most this many steps after the alert's step
STEP_SECONDS = 0.02


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with serving(f"sqlite:///{tmp_path_factory.mktemp('store') / 'store.db'}") as server:
        yield server


def data(n: int = 512) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((n, 8)).astype("float32")
    return x, (x @ np.linspace(-1, 1, 8)[:, None] + 0.1 * rng.standard_normal((n, 1))).astype("float32")


class Burst(keras.callbacks.Callback):
    """The LR x10^35 from the global step BURST_AT on, and Keras's running means kept per step."""

    def __init__(self) -> None:
        super().__init__()
        self.means: dict[int, float] = {}
        self.epoch = 0

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch

    def on_train_batch_begin(self, batch, logs=None):
        if self.epoch * STEPS_PER_EPOCH + batch == BURST_AT:
            self.model.optimizer.learning_rate.assign(0.05 * 1e35)

    def on_train_batch_end(self, batch, logs=None):
        self.means[self.epoch * STEPS_PER_EPOCH + batch] = float(logs["loss"])
        time.sleep(STEP_SECONDS)


def test_keras_fit_posts_each_batchs_loss_and_is_stopped_by_the_guard(server, tmp_path):
    from losswatch_client.keras import LosswatchCallback

    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.SGD(learning_rate=0.05), loss="mse")
    x, y = data()
    burst = Burst()
    callback = LosswatchCallback(server.url, "keras/burst", spool_dir=str(tmp_path / "spool"), flush_interval=0.1)
    model.fit(x, y, batch_size=16, epochs=10, shuffle=False, validation_data=(x[:64], y[:64]), verbose=0,
              callbacks=[burst, callback])
    watcher = callback.watcher
    assert watcher.flush(timeout=30)

    decision = watcher.decision
    assert decision is not None, "the guard never acted"
    print(f"Keras: burst at {BURST_AT}, {decision.describe()}; stopped at {callback.stopped_at}")
    assert BURST_AT <= decision.step <= callback.stopped_at <= decision.step + WITHIN
    assert max(burst.means) == callback.stopped_at < 10 * STEPS_PER_EPOCH  # stopped after that batch
    assert decision.alert_id in {a["id"] for a in server.get("/v1/runs/keras%2Fburst/alerts").json()}

    posted = dict(server.series("keras/burst", "train/loss"))
    assert sorted(posted) == list(range(callback.stopped_at + 1))  # every batch, at its global step
    calm = [s for s in posted if s < BURST_AT]
    for step in calm:  # each batch's own loss: the running means taken apart
        k, mean = step % STEPS_PER_EPOCH, burst.means[step]
        own = mean if k == 0 else (k + 1) * mean - k * burst.means[step - 1]
        assert posted[step] == pytest.approx(own, rel=1e-4, abs=1e-6)
    assert any(abs(posted[s] - burst.means[s]) > 0.05 * burst.means[s] for s in calm)  # and not the means
    tags = {t["tag"] for t in server.get("/v1/runs/keras%2Fburst").json()["tags"]}
    assert {"train/lr", "eval/loss"} <= tags
    assert server.get("/v1/runs/keras%2Fburst").json()["status"] == "finished"  # on_train_end
    watcher.close()
