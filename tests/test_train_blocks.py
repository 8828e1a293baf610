"""The engine prepares minibatches a block of steps at a time (issue 12 item 12: nothing sized by
tau_i is built up front): any block size gives bit-identical indices, augmentation and models
(the mean losses are summed block by block)."""

import numpy as np
import torch

from fedsim.engine import train as T
from fedsim.algorithms.algorithm import algorithm
from fedsim.engine.batches import BatchStream, batch_indices
from fedsim.engine.train import Task, train_cohort

from test_augment import _workload

TASKS = [Task(0, 12, 5), Task(1, 7, 6), Task(2, 3, 7)]  # 5 steps an epoch: several epochs, unequal tau_i


def test_batch_stream_in_blocks_equals_all_at_once():
    _, work, _ = _workload(False)
    for t in TASKS:
        whole = batch_indices(work, 3, t, 8)
        assert whole.shape == (t.steps, 8)
        s, parts, left = BatchStream(work, 3, t, 8), [], t.steps
        for n in (1, 4, 0, 2, 5, 100):
            parts.append(s.take(min(n, left)))
            left -= min(n, left)
        np.testing.assert_array_equal(np.concatenate(parts), whole)
        # each epoch (40 samples, 5 steps of 8) is a permutation of the client's samples
        local = sorted(work.client_indices[t.client].tolist())
        assert len(local) == 40
        for e in range(t.steps // 5):
            assert sorted(whole[e * 5 : (e + 1) * 5].ravel().tolist()) == local


def test_block_size_does_not_change_training(monkeypatch):
    _, work, spec = _workload(True)  # augmentation on: its draws are read in blocks too
    ref = train_cohort(work, algorithm(spec), dict(work.init_params), TASKS, round_lr=0.1, seed=3, chunk=3)
    per_step = 3 * 8 * work.x_train[0].numel() * work.x_train.element_size()
    for span in (1, 3, 5):
        monkeypatch.setattr(T, "PREGATHER_BYTES", span * per_step)
        got = train_cohort(work, algorithm(spec), dict(work.init_params), TASKS, round_lr=0.1, seed=3, chunk=3)
        for k in ref.deltas:
            assert torch.equal(got.deltas[k], ref.deltas[k]), (span, k)
