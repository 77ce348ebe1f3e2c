"""One trainer for 1..N processes: DistributedModelParallel (sharded tables, data-parallel dense part),
the sparse optimizer fused into the backward, TrainPipelineSparseDist, periodic evaluation,
atomic DCP checkpoints and exact resume.

Run it in every process of a torchrun group or alone (see :mod:`recpipe.launch`).
"""

from __future__ import annotations

import itertools
import json
import math
import time
from collections import deque
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal, Protocol

import numpy as np
import torch
import torch.distributed as dist
from torchrec.distributed.train_pipeline import TrainPipelineBase, TrainPipelineSparseDist
from tqdm import tqdm

from recpipe.auc import binary_auc
from recpipe.batch import Batch
from recpipe.config import CsvOptions, RecpipeConfig
from recpipe.data.types import DataError
from recpipe.features.fg import FGStats
from recpipe.features.spec import FeatureSpec
from recpipe.models.registry import build_model
from recpipe.models.train_model import TrainModel
from recpipe.train.accumulate import DenseSchedule, ScheduledOptimizer
from recpipe.train.async_checkpoint import CheckpointCadence, CheckpointWriter
from recpipe.train.checkpoint import (
    CheckpointMeta,
    latest_checkpoint,
    load_weights_and_optimizer,
    model_prefix,
    model_state,
    restore_rng_state,
)
from recpipe.train.data import Shuffle, StepBatches, normalize_step_weights
from recpipe.train.dist import DistEnv, init_distributed, plan_sharding, plan_summary, shard_model, shutdown
from recpipe.train.heap import keep_freed_memory
from recpipe.train.memory import check_fits, embedding_memory_report, planned_device_memory
from recpipe.train.optim import (
    apply_sparse_optimizer,
    check_sparse_optimizer,
    combined_optimizer,
    dense_clipping,
    dense_optimizer,
    set_initial_accumulator,
)
from recpipe.train.result import PhaseClock, TrainResult
from recpipe.train.step import PipelineStep
from recpipe.train.warm import check_compatible, warm_checkpoint
from recpipe.train.zch import EvictionCounter

METRICS_FILE = "metrics.jsonl"
AUC_WINDOW_ROWS = 100_000
# data.num_workers > 0: FG in threads of the rank. pyarrow and numpy release the GIL, and a forked worker
# costs more to hand its batch over than FG itself (1 rank on 2 cores: threads +10%, a process -3%).
DATA_WORKER_KIND = "thread"


class Evaluate(Protocol):
    """Metrics of the sharded model over all of ``uri``, computed by every rank together (the trainer's
    periodic and final evaluation): :func:`recpipe.eval.checkpoint.evaluate_distributed`. The trainer
    takes it as an argument: evaluation sits above training and the trainer imports none of it."""

    def __call__(
        self,
        model: torch.nn.Module,
        spec: FeatureSpec,
        uri: str,
        global_batch_size: int,
        rank: int,
        world_size: int,
        *,
        neg_sample_rate: float,
        group: Any,
        on_bad_row: Literal["error", "skip"],
        csv: CsvOptions | None,
        oracle_column: str | None,
    ) -> dict[str, Any]: ...


def train(
    cfg: RecpipeConfig,
    spec: FeatureSpec,
    train_uri: str,
    eval_uri: str | None,
    out_dir: Path,
    resume: bool = True,
    evaluate: Evaluate | None = None,
    final_checkpoint: bool = True,
) -> TrainResult:
    """Train ``cfg.model`` on ``train_uri`` in this process's group (world size 1 when run alone).

    ``cfg.data.batch_size`` is the **global** batch: each of ``W`` ranks takes its ``1/W`` of every
    step, its ``rows_per_rank`` (see :mod:`recpipe.train.data`), so a run gives the same result, up to
    float summation order, on any number of ranks. Writes ``out_dir/metrics.jsonl``,
    ``out_dir/checkpoints/`` and ``out_dir/train_result.json``.

    Args:
        cfg (RecpipeConfig): the config (``data``, ``model``, ``train`` sections).
        spec (FeatureSpec): the fitted FeatureSpec of the training data.
        train_uri (str), eval_uri (str | None): the splits.
        out_dir (Path): output folder.
        resume (bool): continue from ``out_dir``'s latest checkpoint when there is one.
        evaluate (Evaluate | None): scores the model on ``eval_uri`` every ``train.eval_every_steps`` and at
            the end; None: no evaluation (:func:`recpipe.launch.worker.train` passes evaluation's).
        final_checkpoint (bool): False: no checkpoint at the end (the config's mid-run cadence still writes
            its own), for a caller that reads only the result's metrics (a benchmark's many short runs: a
            full-size model's checkpoint is ~400 MB); the result's ``checkpoint`` is then the last mid-run one
            or None.

    Example::

        result = train(cfg, spec, "runs/x/data/train", "runs/x/data/eval", Path("runs/x/train"),
                       evaluate=evaluate_distributed)
        result.eval["auc"]
    """
    keep_freed_memory()  # each step's large buffers reused, not faulted in again (recpipe.train.heap)
    env = init_distributed()
    try:
        return _Trainer(cfg, spec, env, Path(out_dir), evaluate).run(
            train_uri, eval_uri, resume, final_checkpoint
        )
    finally:
        shutdown(env)


class _Trainer:
    def __init__(
        self, cfg: RecpipeConfig, spec: FeatureSpec, env: DistEnv, out_dir: Path, evaluate: Evaluate | None
    ) -> None:
        self.cfg, self.spec, self.env, self.out_dir = cfg, spec, env, out_dir
        self.evaluate = evaluate
        self._gauc_noted = False
        # Read once: every step (training and evaluation) covers this many rows over all ranks; the
        # rows of one rank (``rows_per_rank``) come only from StepPlan.rank_range.
        self.global_batch_size = cfg.data.batch_size
        if env.is_main:
            out_dir.mkdir(parents=True, exist_ok=True)
        memory = embedding_memory_report(spec, cfg.train.sparse_optimizer.type)
        self.log(memory.summary())
        if not cfg.train.allow_oversize:  # before build_model allocates the tables
            check_fits(memory, planned_device_memory(env.device.type, env.world_size, env.local_world_size))
        check_sparse_optimizer(cfg.train.sparse_optimizer, env.device.type)  # before building big tables

        torch.manual_seed(cfg.train.seed)  # the same initial model on every rank
        model = build_model(spec, cfg.model, device=torch.device("cpu"))
        self.schedule = DenseSchedule.from_config(cfg.train, env.device.type)
        step_model = PipelineStep(TrainModel(model), env.world_size, cfg.train.mixed_precision, self.schedule)
        self.prefix = model_prefix(step_model, model)
        apply_sparse_optimizer(step_model, cfg.train.sparse_optimizer, env.device.type)
        plan, messages = plan_sharding(step_model, env, cfg.train.sharding, cfg.train.sharding_types)
        for m in messages:
            self.log(m)
        # The console gets a few lines; the whole plan and memory table go to plan.txt.
        details = out_dir / "plan.txt"
        if env.is_main:
            details.write_text(f"{memory.format()}\n\n{plan}\n")
        self.log(
            f"sharding plan for {env.world_size} rank(s) on {env.device.type} (in full: {details}):\n"
            f"{plan_summary(plan)}"
        )
        self.dmp = shard_model(step_model, env, plan)
        initial = cfg.train.sparse_optimizer.initial_accumulator_value
        if initial:  # before a resume or warm start loads the states
            set_initial_accumulator(self.dmp.fused_optimizer, initial)
        self.dense_opt = dense_optimizer(self.dmp, cfg.train.dense_optimizer, dense_clipping(cfg.train))
        dense_step = ScheduledOptimizer(self.dense_opt, self.schedule)
        self.optimizer = combined_optimizer(self.dmp.fused_optimizer, dense_step)
        self.pipeline = self._pipeline()

    # ------------------------------------------------------------------------------------ helpers
    def log(self, msg: str) -> None:
        if self.env.is_main:
            tqdm.write(f"[recpipe.train] {msg}")

    def _pipeline(self) -> TrainPipelineBase | TrainPipelineSparseDist:
        # TrainPipelineSparseDist fx-traces the model down to its sharded modules; PipelineStep is shaped
        # for that. Check it up front so a model that cannot be traced still trains (without overlap).
        from torchrec.distributed.train_pipeline.tracing import Tracer, _get_leaf_module_names

        try:
            Tracer(leaf_modules=_get_leaf_module_names(self.dmp.module)).trace(self.dmp.module)
        except Exception as err:  # noqa: BLE001 - any tracing failure means "no pipelining"
            self.log(f"the model is not fx-traceable to its embeddings ({err}); using TrainPipelineBase")
            return TrainPipelineBase(self.dmp, self.optimizer, self.env.device)
        return TrainPipelineSparseDist(self.dmp, self.optimizer, self.env.device, execute_all_batches=True)

    def _model_state(self) -> dict[str, Any]:
        return model_state(self.dmp.state_dict(), self.prefix)

    def _write_metrics(self, record: dict[str, Any]) -> None:
        if self.env.is_main:
            with open(self.out_dir / METRICS_FILE, "a") as fh:
                fh.write(json.dumps(record) + "\n")

    def _trim_metrics(self, after_step: int) -> None:
        # A resumed run redoes the steps after its checkpoint: drop their records from the killed run.
        path = self.out_dir / METRICS_FILE
        if self.env.is_main and path.is_file():
            keep = [ln for ln in path.read_text().splitlines() if ln and json.loads(ln)["step"] <= after_step]
            path.write_text("".join(ln + "\n" for ln in keep))

    def _evaluate(self, evaluate: Evaluate, eval_uri: str, step: int) -> dict[str, Any]:
        detach = getattr(self.pipeline, "detach", None)
        if detach is not None:
            detach()  # restores the sharded modules' own forwards; progress() re-attaches
        cfg = self.cfg
        t0 = time.perf_counter()
        metrics = evaluate(
            self.dmp,
            self.spec,
            eval_uri,
            self.global_batch_size,
            self.env.rank,
            self.env.world_size,
            neg_sample_rate=cfg.data.neg_sample_rate,
            group=self.env.cpu_group,
            on_bad_row=cfg.data.on_bad_row,
            csv=cfg.csv_options(),
            oracle_column=cfg.data.oracle_column,
        )
        self.dmp.train()
        record = {"step": step, **{f"eval_{k}": v for k, v in metrics.items()}}
        self._write_metrics(record)
        gauc = metrics.get("gauc")
        has_gauc = gauc is not None and math.isfinite(gauc)
        if not has_gauc and not self._gauc_noted:
            self._gauc_noted = True  # said once, not at every evaluation
            self.log("gauc omitted: the config names no user column (data.group_column)")
        self.log(
            f"step {step}: eval auc={metrics['auc']:.4f}"
            + (f" gauc={gauc:.4f}" if has_gauc else "")
            + f" logloss={metrics['logloss']:.4f} rows={metrics['rows']} ({time.perf_counter() - t0:.1f}s)"
        )
        return metrics

    def _meta(
        self, step: int, epoch: int, position: int, epoch_rows: int, rows_trained: int
    ) -> CheckpointMeta:
        return CheckpointMeta(
            step=step,
            epoch=epoch,
            position=position,
            epoch_rows=epoch_rows,
            rows_trained=rows_trained,
            world_size=self.env.world_size,
            global_batch_size=self.global_batch_size,
            config_digest=self.cfg.digest(),
            spec_digest=self.spec.digest(),
            grad_scaler=self.schedule.state(),
        )

    def _save(self, writer: CheckpointWriter, meta: CheckpointMeta) -> Path:
        t0 = time.perf_counter()
        path = writer.save(meta, self._model_state(), self.optimizer.state_dict())
        how = "staged, writing in the background" if writer.background else "written"
        self.log(f"step {meta.step}: checkpoint {path} {how} ({time.perf_counter() - t0:.1f}s)")
        return path

    def _reader(self, train_uri: str, start_row: int, epoch: int) -> StepBatches:
        cfg = self.cfg
        shuffle = Shuffle(cfg.train.seed, epoch, cfg.data.shuffle_buffer_rows) if cfg.data.shuffle else None
        return StepBatches(
            train_uri,
            self.spec,
            self.global_batch_size,
            self.env.rank,
            self.env.world_size,
            start_row=start_row,
            on_bad_row=cfg.data.on_bad_row,
            csv=cfg.csv_options(),
            num_workers=cfg.data.num_workers,
            worker_kind=DATA_WORKER_KIND,
            shuffle=shuffle,
        )

    def _warm_start(self, init_from: str) -> Path:
        # A new run: the parent's tensors (resharded to this plan), none of its position, random state
        # or step count; the checkpoint is verified and its config checked against this one first.
        ckpt = warm_checkpoint(init_from)
        check_compatible(ckpt, self.cfg, self.spec)
        meta = load_weights_and_optimizer(ckpt, self._model_state(), self.optimizer, self.dense_opt, self.log)
        self.log(
            f"warm start from {ckpt} (its step {meta.step}, written by {meta.world_size} rank(s), now "
            f"{self.env.world_size}): weights, optimizer state and zch remaps; training starts at step 0"
        )
        return ckpt

    def _resume(self, resume: bool) -> tuple[Path | None, CheckpointMeta | None]:
        ckpt = latest_checkpoint(self.out_dir) if resume else None
        if ckpt is None:
            if self.env.is_main:
                (self.out_dir / METRICS_FILE).unlink(missing_ok=True)
            if self.cfg.train.init_from:  # only a fresh run: an interrupted warm-started run resumes its own
                self._warm_start(self.cfg.train.init_from)
            return None, None
        # resume: the model and optimizers in place (resharded to this run's plan), then the random state
        meta = load_weights_and_optimizer(ckpt, self._model_state(), self.optimizer, self.dense_opt, self.log)
        restore_rng_state(ckpt, meta)
        self.schedule.restore(meta.step, meta.grad_scaler)
        self._trim_metrics(meta.step)
        self.log(
            f"resumed from {ckpt}: step {meta.step}, epoch {meta.epoch}, row {meta.position} "
            f"(written by {meta.world_size} rank(s), now {self.env.world_size})"
        )
        if meta.spec_digest != self.spec.digest():
            raise ValueError(
                f"{ckpt} was trained with another FeatureSpec; start in a new folder or with resume off"
            )
        if meta.config_digest != self.cfg.digest():
            self.log("the config differs from the checkpoint's (fine for max_steps, epochs, eval or logging)")
        if meta.global_batch_size != self.global_batch_size:
            self.log(
                f"global batch size changed {meta.global_batch_size} -> {self.global_batch_size}: "
                "no row is repeated or skipped, but the steps differ from the original run's"
            )
        return ckpt, meta

    # --------------------------------------------------------------------------------------- run
    def run(
        self, train_uri: str, eval_uri: str | None, resume: bool, final_checkpoint: bool = True
    ) -> TrainResult:
        env, tc = self.env, self.cfg.train
        resumed_from, meta = self._resume(resume)
        step, epoch, position, rows_trained = (
            (meta.step, meta.epoch, meta.position, meta.rows_trained) if meta else (0, 0, 0, 0)
        )
        reader = self._reader(train_uri, position, epoch)
        epoch_rows = reader.plan.num_rows
        if epoch_rows == 0:  # else a header-only file "trains" 0 steps and leaves an untrained ckpt-0
            raise DataError(
                f"{train_uri}: no training rows (empty files, or a header only); nothing to train on"
            )
        if meta is not None and meta.epoch_rows != epoch_rows:
            raise ValueError(
                f"{train_uri} has {epoch_rows} rows but {resumed_from} was trained on {meta.epoch_rows}"
            )
        if position >= epoch_rows:  # the checkpoint closed an epoch
            epoch, position = epoch + 1, 0
            reader = self._reader(train_uri, 0, epoch)
        steps_per_epoch = StepBatches.steps_for(epoch_rows, self.global_batch_size)
        total = step + reader.plan.num_steps + (tc.epochs - epoch - 1) * steps_per_epoch
        if tc.max_steps is not None:
            total = min(total, tc.max_steps)
        self.log(
            f"training {max(total - step, 0)} step(s) of {self.global_batch_size} rows "
            f"({reader.plan.rows_per_rank(env.rank)} per rank), {epoch_rows} rows per epoch"
        )

        meter = _Meter(env, total, step)
        evictions = EvictionCounter(self.dmp)  # the remapping as loaded (resume, warm start) or empty
        data_stats = FGStats()  # this rank's rows read / used / skipped over every pass of this run
        last_ckpt, last_ckpt_step = resumed_from, (meta.step if meta else -1)
        writer = CheckpointWriter(
            self.out_dir, self.cfg, self.spec, tc.keep_last_checkpoints, tc.checkpoint_async, self.log
        )
        cadence = CheckpointCadence(tc.checkpoint_every_steps, tc.checkpoint_every_seconds, env.cpu_group)
        evaluate = self.evaluate if eval_uri else None
        evaluating = bool(evaluate and tc.eval_every_steps)
        while epoch < tc.epochs and step < total:
            plan = reader.plan
            n_steps = min(plan.num_steps, total - step)
            steps = iter(reader)  # starts the data workers, if any
            batches = normalize_step_weights(itertools.islice(steps, n_steps), env.world_size, env.cpu_group)
            segment: Iterator[Batch] = iter(())
            for k in range(n_steps):
                if k == 0 or (evaluating and step % tc.eval_every_steps == 0):
                    # The pipeline holds up to two batches whose input all-to-all has started; it must
                    # be empty when an evaluation calls the sharded modules directly, so it is fed in
                    # segments that end at evaluation steps.
                    until = n_steps - k
                    if evaluating:
                        until = min(until, tc.eval_every_steps - step % tc.eval_every_steps)
                    segment = itertools.islice(batches, until)
                logits, labels, weights, loss = self.pipeline.progress(segment)
                step += 1
                lo, hi = plan.step_range(k)
                rows_trained += hi - lo
                position = plan.position_after(k + 1)
                meter.update(hi - lo, loss, logits, labels, weights)
                if step % tc.log_every_steps == 0 or step == total:
                    self._write_metrics(meter.flush(step, epoch))
                if evaluate and evaluating and step % tc.eval_every_steps == 0 and step < total:
                    with meter.clock.apart("eval"):
                        self._evaluate(evaluate, eval_uri, step)
                # the last step's checkpoint is the final one; none inside a gradient accumulation
                if step < total and self.schedule.window_starts() and cadence.due(step):
                    done = position >= epoch_rows
                    ckpt_meta = self._meta(
                        step, epoch + done, 0 if done else position, epoch_rows, rows_trained
                    )
                    with meter.clock.apart("checkpoint"):  # waiting for the previous write, and staging
                        last_ckpt, last_ckpt_step = self._save(writer, ckpt_meta), step
                    cadence.saved()
            steps.close()  # stops the data workers (max_steps can end a pass early)
            data_stats.add(reader.stats)
            if position >= epoch_rows:
                epoch, position = epoch + 1, 0
                if epoch < tc.epochs and step < total:
                    reader = self._reader(train_uri, 0, epoch)
        train_seconds = meter.close()  # the steps' wall time: the evaluations and checkpoints apart

        eval_metrics = None
        if evaluate and eval_uri:
            with meter.clock.apart("eval"):
                eval_metrics = self._evaluate(evaluate, eval_uri, step)
        before_final = meter.clock.wall["checkpoint"]
        with meter.clock.apart("checkpoint"):
            if final_checkpoint and step != last_ckpt_step:
                last_ckpt = self._save(writer, self._meta(step, epoch, position, epoch_rows, rows_trained))
            writer.close()  # the end of training waits for the last write; a failed one fails the run
        seconds = train_seconds + meter.clock.total
        result = TrainResult(
            steps=step,
            epochs_completed=epoch,
            rows_trained=rows_trained,
            seconds=seconds,
            rows_per_second=meter.rows / train_seconds if train_seconds > 0 else 0.0,
            steady_rows_per_second=meter.steady_rate,
            rows_per_cpu_second=meter.cpu_rate,
            final_loss=meter.last_loss,
            eval=eval_metrics,
            checkpoint=str(last_ckpt) if last_ckpt else None,
            world_size=env.world_size,
            resumed_from=str(resumed_from) if resumed_from else None,
            rows=rows_report(data_stats, env),
            zch_evictions=zch_evictions(evictions, env),
            train_seconds=train_seconds,
            eval_seconds=meter.clock.wall["eval"],
            checkpoint_seconds=meter.clock.wall["checkpoint"],
            final_checkpoint_seconds=meter.clock.wall["checkpoint"] - before_final,
        )
        if env.is_main:
            result.write(self.out_dir)
        rows = result.rows or {}
        self.log(
            f"done: {step} steps, {meter.rows} rows in {train_seconds:.1f}s ({result.rows_per_second:,.0f} rows/s;"
            f" evaluation {result.eval_seconds:.1f}s, checkpoints {result.checkpoint_seconds:.1f}s apart); "
            f"data: read {rows.get('rows_read')}, used {rows.get('rows_used')}, skipped {rows.get('rows_skipped')}"
            f" (on_bad_row={self.cfg.data.on_bad_row}), truncated histories {rows.get('truncated_histories')}"
        )
        return result


def rows_report(stats: FGStats, env: DistEnv) -> dict[str, Any]:
    """``stats`` summed over the ranks (a collective on the CPU group when there is more than one).

    Args:
        stats (FGStats): this rank's counts.
        env (DistEnv): the process group's description.
    """
    parts = [stats]
    if env.world_size > 1:
        parts = [FGStats() for _ in range(env.world_size)]
        dist.all_gather_object(parts, stats, group=env.cpu_group)
    total = FGStats()
    for part in parts:
        total.add(part)
    return {
        "rows_read": total.rows_read,
        "rows_used": total.rows_emitted,
        "rows_skipped": total.rows_skipped,
        "truncated_histories": total.truncated_histories,
        "skipped_by_column": dict(sorted(total.skipped_by_column.items())),
    }


def zch_evictions(counter: EvictionCounter, env: DistEnv) -> dict[str, int] | None:
    """The evictions ``counter`` saw, per zch table, summed over the ranks (a collective on the CPU group when
    there is more than one); None without zch tables."""
    counts = counter.counts()
    if not counts:
        return None
    if env.world_size > 1:
        parts: list[dict[str, int]] = [{} for _ in range(env.world_size)]
        dist.all_gather_object(parts, counts, group=env.cpu_group)
        counts = {t: sum(p.get(t, 0) for p in parts) for t in sorted(set().union(*parts))}
    return dict(sorted(counts.items()))


class _Meter:
    """Training loss (all ranks), global rows/s, and a running AUC over rank 0's latest rows; the tqdm bar."""

    def __init__(self, env: DistEnv, total: int, step: int) -> None:
        self.env = env
        self.bar = tqdm(
            total=total, initial=step, disable=not env.is_main, desc="train", unit="step", mininterval=2.0
        )
        self.start = time.perf_counter()
        self.clock = PhaseClock()  # evaluations and checkpoints: not training time
        self.rows = 0
        self.after_first: tuple[float, float, int] | None = None  # wall, CPU, rows after step 1
        self.steady_rate = self.cpu_rate = 0.0
        self.loss_sum = torch.zeros((), dtype=torch.float64, device=env.device)
        self.loss_steps = 0
        self.last_loss: float | None = None
        self.window: deque[tuple[np.ndarray, np.ndarray]] = deque()
        self.window_rows = 0

    def update(
        self, rows: int, loss: torch.Tensor, logits: torch.Tensor, labels: torch.Tensor, weights: torch.Tensor
    ) -> None:
        self.rows += rows
        if self.after_first is None:
            self.after_first = (time.perf_counter(), time.process_time(), self.rows)
        self.loss_sum += loss.double()
        self.loss_steps += 1
        if self.env.is_main:
            real = (weights > 0).cpu().numpy()  # padding rows have weight 0
            if labels.dim() == 2:  # a multi-task model: the running AUC is the primary task's
                labels, logits = labels[:, 0], logits[:, 0]
            self.window.append((labels.cpu().numpy()[real], logits.float().cpu().numpy()[real]))
            self.window_rows += int(real.sum())
            while self.window_rows - len(self.window[0][0]) >= AUC_WINDOW_ROWS:
                self.window_rows -= len(self.window.popleft()[0])
        self.bar.update(1)

    def flush(self, step: int, epoch: int) -> dict[str, Any]:
        """The record of the steps since the last flush (a collective: every rank calls it)."""
        # Each rank holds its share of every step's mean loss; the sum over ranks is the global mean.
        total = self.loss_sum.clone()
        if self.env.world_size > 1:
            dist.all_reduce(total)
        self.last_loss = float(total.item()) / max(self.loss_steps, 1)
        self.loss_sum.zero_()
        self.loss_steps = 0
        rate = self.rows / max(time.perf_counter() - self.start - self.clock.total, 1e-9)
        auc = float("nan")
        if self.env.is_main and self.window:
            auc = binary_auc(
                np.concatenate([w[0] for w in self.window]), np.concatenate([w[1] for w in self.window])
            )
            self.bar.set_postfix(
                loss=f"{self.last_loss:.4f}", auc=f"{auc:.4f}", rows_s=f"{rate:,.0f}", refresh=False
            )
        return {
            "step": step,
            "epoch": epoch,
            "loss": self.last_loss,
            "rows_per_s": rate,
            "train_auc_rank0": auc,
        }

    def close(self) -> float:
        """Wall seconds of training steps since the start (evaluations and checkpoints apart, all after
        step 1); sets the steady (after step 1) wall and CPU throughputs."""
        self.bar.close()
        now, cpu = time.perf_counter(), time.process_time()
        if self.after_first is not None and self.rows > self.after_first[2]:
            t0, c0, r0 = self.after_first
            self.steady_rate = (self.rows - r0) / max(now - t0 - self.clock.total, 1e-9)
            self.cpu_rate = (self.rows - r0) / max(cpu - c0 - self.clock.cpu, 1e-9)
        return now - self.start - self.clock.total
