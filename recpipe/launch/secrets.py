"""The one table of Kubernetes Secrets recpipe reads: Secret name → {secret key: environment variable}.

Credentials never travel as parameters: the pipeline attaches these Secrets to its steps as environment
variables (``pipelines/training_pipeline.py``), and the PyTorchJob gives its pods the ones they need
(:mod:`recpipe.launch.cluster`). ``manifests/secrets/`` templates every key listed here.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

ODPS_SECRET = "recpipe-odps"
OBJECT_STORE_SECRET = "recpipe-object-store"
MLFLOW_SECRET = "recpipe-mlflow"

SECRETS: dict[str, dict[str, str]] = {
    ODPS_SECRET: {
        "access_id": "ODPS_ACCESS_ID",
        "access_key": "ODPS_ACCESS_KEY",
        "endpoint": "ODPS_ENDPOINT",
    },
    OBJECT_STORE_SECRET: {
        "access_key_id": "AWS_ACCESS_KEY_ID",
        "secret_access_key": "AWS_SECRET_ACCESS_KEY",
        "endpoint_url": "AWS_ENDPOINT_URL",
    },
    MLFLOW_SECRET: {"token": "MLFLOW_TRACKING_TOKEN"},
}

# What the training pods read: checkpoints and data in object storage, the MLflow token (no ODPS: the
# train step's inputs are already Parquet on the shared volume).
JOB_SECRETS = (OBJECT_STORE_SECRET, MLFLOW_SECRET)


@dataclass(frozen=True)
class SecretEnv:
    """An environment variable read from a Kubernetes Secret: ``env`` ← ``secret[key]``.

    Args:
        env (str): the variable's name.
        secret (str): the Secret's name.
        key (str): the key in the Secret.
        optional (bool): a missing Secret or key leaves the variable unset instead of failing the pod.
    """

    env: str
    secret: str
    key: str
    optional: bool = True


def secret_env(names: Iterable[str]) -> tuple[SecretEnv, ...]:
    """Every variable of the Secrets ``names``, in the table's order.

    Args:
        names (Iterable[str]): Secret names, keys of :data:`SECRETS`.

    Raises:
        KeyError: a name the table does not have.
    """
    out = []
    for name in names:
        if name not in SECRETS:
            raise KeyError(f"unknown Secret {name!r}; known: {sorted(SECRETS)}")
        out += [SecretEnv(env, name, key) for key, env in SECRETS[name].items()]
    return tuple(out)
