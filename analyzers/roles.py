"""What each tag is, from the names real trainers give them (Hugging Face, Megatron,
OLMo-core, Composer, Lightning/NeMo, Keras, plain scripts)."""

from __future__ import annotations

import enum
import re
from collections.abc import Iterable, Mapping


class Role(str, enum.Enum):
    LOSS = "loss"
    EVAL_LOSS = "eval_loss"
    GRAD_NORM = "grad_norm"
    LEARNING_RATE = "learning_rate"
    LOSS_SCALE = "loss_scale"
    OTHER = "other"

    def __str__(self) -> str:
        return self.value


_EVAL = r"(eval|val|valid|validation|test|dev)"
# First match wins; patterns see the tag lower-cased.
_RULES: list[tuple[Role, re.Pattern[str]]] = [
    (Role.LOSS_SCALE, re.compile(r"loss[-_ ]?scale|(^|/)scaler?(/|$)|grad_scale")),
    (Role.GRAD_NORM, re.compile(r"grad(ient)?[-_ ]?norm|l2_norm/grad|(^|/)gnorm($|/)|total grad norm")),
    (Role.LEARNING_RATE, re.compile(r"(^|[/_ -])(lr|learning[-_ ]?rate)($|[/_ -]|\d)")),
    (Role.EVAL_LOSS, re.compile(rf"(^|[/_ -]){_EVAL}[/_ -]?.*loss|loss.*[/_ -]{_EVAL}($|[/_ -])")),
    (Role.LOSS, re.compile(r"(^|[/_ -])(\w+[_ ])?loss($|[/_ -]|\d)|(^|/)(ce|nll|lm)[-_ ]loss|per_token_loss")),
]
# Not losses, though the word is in them: counters and timings about the loss.
_NOT_LOSS = re.compile(r"(loss_?count|num_?loss|loss.*(time|seconds|ms)$|lossy)")
# A run that is an eval split logged apart (Keras' TensorBoard callback writes `.../train`
# and `.../validation`, TF estimators `.../eval`, each with `epoch_loss` or `loss`): its
# losses are eval losses.  Only these two words, alone or before a suffix (`validation#2`):
# runs called `test-lr3e-4` or `dev` are usually experiments with a train loss.
_EVAL_RUN = re.compile(r"(^|/)(validation|eval)($|[^a-z0-9])")


def infer_role(tag: str, run: str = "") -> Role:
    """The role a tag of `run` most likely plays; OTHER when its name says nothing."""
    name = tag.lower()
    for role, pattern in _RULES:
        if pattern.search(name):
            if role in (Role.LOSS, Role.EVAL_LOSS) and _NOT_LOSS.search(name):
                continue
            return Role.EVAL_LOSS if role is Role.LOSS and _EVAL_RUN.search(run.lower()) else role
    return Role.OTHER


def assign_roles(tags: Iterable[str], overrides: Mapping[str, str | Role] | None = None, run: str = "") -> dict[str, Role]:
    """Roles for every tag of `run`; `overrides` (tag -> role) win over the names."""
    overrides = overrides or {}
    return {tag: Role(overrides[tag]) if tag in overrides else infer_role(tag, run) for tag in tags}
