"""Object-store sources against a real S3 API: moto's S3 server on loopback (``python -m moto.server``, HTTP),
read through pyarrow's S3 filesystem as a cluster's MinIO or S3 would be, credentials and endpoint from the
environment (``AWS_*``, as the Secret ``recpipe-object-store`` sets them in a pod).

The days are uploaded as Spark, Hive and EMR leave them: ``part-00000-<uuid>-c000.snappy.parquet`` files,
``_SUCCESS`` in every folder and at the top, the empty ``dt=…_$folder$`` object EMR writes beside each folder,
and the empty ``dt=…/`` object a console's "create folder" leaves.
"""

from __future__ import annotations

import gzip
import io
import json
import os
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import boto3
import pyarrow as pa
import pyarrow.csv as pacsv
import pytest

from recpipe.data import DataError, Shard, open_source
from recpipe.data.synthetic import generate
from recpipe.stages import ingest

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "configs" / "din_taobao_small.yaml"
DAYS = ("20260101", "20260102", "20260103")
BUCKET = "lake"


@dataclass(frozen=True)
class Store:
    client: object  # boto3's S3 client, to put objects as other writers would
    env: dict[str, str]  # what a process needs to reach the store
    local_days: Path  # the same days on local disk


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _put(client, key: str, body: bytes = b"") -> None:
    client.put_object(Bucket=BUCKET, Key=key, Body=body)


def _spark_layout(
    client, prefix: str, days: Path, name: str = "part-00000-{uuid}-c000.snappy.parquet"
) -> None:
    """Upload each ``days/dt=…/`` file as Spark (on EMR) leaves a day: markers, ``_SUCCESS`` and its file names."""
    for folder in sorted(p for p in days.iterdir() if p.is_dir()):
        _put(client, f"{prefix}/{folder.name}/")  # a console's empty folder object
        _put(client, f"{prefix}/{folder.name}_$folder$")  # EMR's folder marker
        for i, f in enumerate(sorted(folder.iterdir())):
            _put(client, f"{prefix}/{folder.name}/{name.format(uuid=uuid.uuid4())}".replace("00000", f"{i:05d}"),
                 f.read_bytes())  # fmt: skip
        _put(client, f"{prefix}/{folder.name}/_SUCCESS")
    _put(client, f"{prefix}/_SUCCESS")


@pytest.fixture(scope="module")
def s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Store]:
    work = tmp_path_factory.mktemp("s3")
    port = _free_port()
    log = open(work / "moto.log", "wb")  # noqa: SIM115 (closed below)
    server = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)], stdout=log, stderr=log
    )
    env = {
        "AWS_ACCESS_KEY_ID": "recpipe-test",
        "AWS_SECRET_ACCESS_KEY": "recpipe-test-secret",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}",
        "AWS_EC2_METADATA_DISABLED": "true",
    }
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError as e:
                if server.poll() is not None or time.monotonic() > deadline:
                    why = (work / "moto.log").read_text()
                    raise RuntimeError(f"moto's S3 server did not start: {why}") from e
                time.sleep(0.1)
        client = boto3.client(
            "s3",
            endpoint_url=env["AWS_ENDPOINT_URL"],
            aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"],
            region_name=env["AWS_DEFAULT_REGION"],
        )
        client.create_bucket(Bucket=BUCKET)
        days = work / "taobao"
        generate("taobao", rows=1500, out=days, days=len(DAYS), start=DAYS[0])
        _spark_layout(client, "taobao", days)
        with pytest.MonkeyPatch.context() as mp:
            for k, v in env.items():
                mp.setenv(k, v)
            yield Store(client, env, days)
    finally:
        server.terminate()
        server.wait(timeout=30)
        log.close()


def test_spark_written_days_ingest_from_s3_through_the_cli_as_from_local_disk(
    s3: Store, tmp_path: Path
) -> None:
    """``recpipe ingest --source s3://… --partitions last:2`` in its own process (it must also exit cleanly once
    pyarrow's S3 client is up): the same splits, digests and partitions as ingesting the local copy."""
    out = tmp_path / "from-s3"
    cmd = [sys.executable, "-m", "recpipe.cli.main", "ingest", "--config", str(CONFIG),
           "--source", f"s3://{BUCKET}/taobao", "--partitions", "last:2", "--out", str(out)]  # fmt: skip
    done = subprocess.run(cmd, env={**os.environ, **s3.env}, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads((out / "_meta.json").read_text())
    local = ingest.run(str(s3.local_days), tmp_path / "local", "clk", partitions="last:2")
    assert got["partitions"] == local.partitions == ["dt=20260102"]
    assert got["eval_partitions"] == local.eval_partitions == ["dt=20260103"]
    assert got["partition_digests"] == local.partition_digests
    assert (got["train_digest"], got["eval_digest"]) == (local.train_digest, local.eval_digest)
    assert (got["train_rows"], got["eval_rows"]) == (local.train_rows, local.eval_rows) == (500, 500)
    assert got["source"] == f"s3://{BUCKET}/taobao"


def test_gzipped_csv_days_read_from_s3_as_from_local_disk(s3: Store, tmp_path: Path) -> None:
    local = tmp_path / "csv"
    for i, day in enumerate(DAYS):
        (local / f"dt={day}").mkdir(parents=True)
        buf = io.BytesIO()
        pacsv.write_csv(
            pa.table({"user_id": [10 * i + j for j in range(4)], "clk": [j % 2 for j in range(4)]}), buf
        )
        (local / f"dt={day}" / "part-00000.csv.gz").write_bytes(gzip.compress(buf.getvalue()))
    _spark_layout(s3.client, "csvdays", local, name="part-00000.csv.gz")

    def read(uri: str) -> pa.Table:
        src = open_source(uri, partitions="dt=20260102..20260103")
        return pa.Table.from_batches([sb.batch for sb in src.iter_batches(Shard(0, 1), batch_rows=3)])

    got = read(f"s3://{BUCKET}/csvdays")
    assert got.equals(read(str(local)))
    assert got.column("dt").to_pylist() == ["20260102"] * 4 + ["20260103"] * 4
    assert got.column("user_id").to_pylist() == [10, 11, 12, 13, 20, 21, 22, 23]
    # The whole prefix unpartitioned: every day's rows, no marker or _SUCCESS taken as data.
    assert open_source(f"s3://{BUCKET}/csvdays").num_rows() == 12


def test_what_is_not_there_or_not_data_is_an_error_naming_it(s3: Store) -> None:
    with pytest.raises(DataError, match=r"no such file or folder: 's3://nobucket/taobao'"):
        open_source("s3://nobucket/taobao")
    with pytest.raises(DataError, match=rf"no such file or folder: 's3://{BUCKET}/taobau'"):
        open_source(f"s3://{BUCKET}/taobau", partitions="latest")
    # A Parquet object cut short (an upload that died): the error names the object.
    whole = next((s3.local_days / "dt=20260101").iterdir()).read_bytes()
    _put(s3.client, "cut/dt=20260101/part-00000.parquet", whole[: len(whole) // 2])
    _put(s3.client, "cut/dt=20260102/part-00000.parquet", whole)
    with pytest.raises(DataError, match=rf"{BUCKET}/cut/dt=20260101/part-00000.parquet"):
        src = open_source(f"s3://{BUCKET}/cut", partitions="last:2")
        for _ in src.iter_batches(Shard(0, 1), batch_rows=1024):
            pass
    # Only markers and _SUCCESS under a prefix: no data files, said so.
    _put(s3.client, "empty/_SUCCESS")
    _put(s3.client, "empty/dt=20260101_$folder$")
    with pytest.raises(DataError, match=rf"no data files in folder 's3://{BUCKET}/empty'.*folder markers"):
        open_source(f"s3://{BUCKET}/empty")
