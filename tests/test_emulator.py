"""pimloader's libdpu emulator (csrc/emulator, pimloader.backends.dpu.emulator): the kernels of
tests/emulator_kernels run as UPMEM DPU C, checked against numpy; every hardware rule the
emulator enforces faults the DPU with the rule named; counters match the DMA done."""
import os
import re
import time

import numpy as np
import pytest

from pimloader.backends.dpu import emulator as E

KERNELS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "emulator_kernels")
HEAP = E.HEAP_POINTER_NAME
VA_BLOCK = 1024  # BLOCK_SIZE of vector_add.c


def kernel(name, **kwargs):
    return E.compile_kernel(os.path.join(KERNELS, name), **kwargs)


def vector_add(nr_dpus, nr_tasklets, n, rng):
    """PrIM VA host flow: split, pad to a common length, push, launch, gather."""
    a = rng.integers(0, 2**32, n, dtype=np.uint32)
    b = rng.integers(0, 2**32, n, dtype=np.uint32)
    per = -(-n // nr_dpus)
    per += per % 2                         # 8-byte multiple of uint32
    transfer = per * 4
    slices = [slice(min(i * per, n), min((i + 1) * per, n)) for i in range(nr_dpus)]
    pad_a = [np.zeros(per, np.uint32) for _ in range(nr_dpus)]
    pad_b = [np.zeros(per, np.uint32) for _ in range(nr_dpus)]
    for i, s in enumerate(slices):
        pad_a[i][: s.stop - s.start] = a[s]
        pad_b[i][: s.stop - s.start] = b[s]
    # as PrIM: the size each DPU works on is padded to 8 bytes (mram_read needs multiples of 8)
    args = [np.array([-(-(s.stop - s.start) * 4 // 8) * 8, transfer], np.uint32) for s in slices]
    with E.DpuSet(nr_dpus) as dpus:
        dpus.load(kernel("vector_add.c", nr_tasklets=nr_tasklets))
        dpus.push("DPU_INPUT_ARGUMENTS", args)
        dpus.push(HEAP, pad_a)
        dpus.push(HEAP, pad_b, offset=transfer)
        dpus.launch()
        out = dpus.gather(HEAP, transfer, offset=transfer).view(np.uint32)
        counters = dpus.counters()
        per_dpu = [dpus.counters(i) for i in range(nr_dpus)]
    got = np.concatenate([out[i][: s.stop - s.start] for i, s in enumerate(slices)])
    return a, b, got, counters, per_dpu, [s.stop - s.start for s in slices], transfer


@pytest.mark.parametrize("nr_tasklets", [1, 11, 16])
@pytest.mark.parametrize("nr_dpus", [1, 7, 64])
def test_vector_add_matches_numpy(nr_dpus, nr_tasklets):
    rng = np.random.default_rng(nr_dpus * 100 + nr_tasklets)
    n = 50_000 + 13 * nr_dpus           # not a multiple of the split: the last DPU is short
    a, b, got, *_ = vector_add(nr_dpus, nr_tasklets, n, rng)
    np.testing.assert_array_equal(got, a + b)


def test_counters_equal_the_dma_done():
    nr_dpus, nr_tasklets, n = 7, 11, 30_001
    _, _, _, total, per_dpu, counts, transfer = vector_add(nr_dpus, nr_tasklets, n, np.random.default_rng(1))
    read_bytes = write_bytes = read_calls = write_calls = 0
    for i, count in enumerate(counts):
        size = -(-count * 4 // 8) * 8
        blocks = -(-size // VA_BLOCK)
        assert per_dpu[i].mram_read_bytes == 2 * size
        assert per_dpu[i].mram_write_bytes == size
        assert per_dpu[i].mram_read_calls == 2 * blocks
        assert per_dpu[i].mram_write_calls == blocks
        # tasklet t takes blocks t, t + NR_TASKLETS, ... (PrIM's split)
        for t in range(nr_tasklets):
            mine = len(range(t, blocks, nr_tasklets))
            assert per_dpu[i].tasklets[t]["mram_write_calls"] == mine
        read_bytes += 2 * size
        write_bytes += size
        read_calls += 2 * blocks
        write_calls += blocks
        # host side: arguments (8 bytes) + A + B in, B out
        assert per_dpu[i].host_to_dpu_bytes == 8 + 2 * transfer
        assert per_dpu[i].dpu_to_host_bytes == transfer
    assert (total.mram_read_bytes, total.mram_write_bytes) == (read_bytes, write_bytes)
    assert (total.mram_read_calls, total.mram_write_calls) == (read_calls, write_calls)
    assert total.nr_dpus == nr_dpus and total.nr_tasklets == nr_tasklets and total.launches == nr_dpus
    assert total.host_to_dpu_bytes == nr_dpus * (8 + 2 * transfer)
    assert total.dma_cycles_model == (77 * read_calls // 2 * 2 + 61 * write_calls) + (read_bytes + write_bytes) // 2


@pytest.mark.parametrize("nr_tasklets", [1, 16, 24])
def test_histogram_two_level_reduction_with_barriers_and_mutex(nr_tasklets):
    nr_dpus, nbytes = 5, 40_000
    rng = np.random.default_rng(nr_tasklets)
    data = [rng.integers(0, 256, nbytes, dtype=np.uint8) for _ in range(nr_dpus)]
    with E.DpuSet(nr_dpus) as dpus:
        dpus.load(kernel("histogram.c", nr_tasklets=nr_tasklets))
        dpus.broadcast("nr_bytes", np.array([nbytes], np.uint32))
        dpus.push(HEAP, data)
        for _ in range(2):              # a second launch starts again from the same MRAM
            dpus.launch()
            for i in range(nr_dpus):
                hist = dpus.copy_from("histogram", 256 * 4, index=i).view(np.uint32)
                np.testing.assert_array_equal(hist, np.bincount(data[i], minlength=256))
                total = dpus.copy_from("total", 8, index=i).view(np.uint64)[0]
                blocks = dpus.copy_from("blocks_seen", 4, index=i).view(np.uint32)[0]
                assert total == nbytes and blocks == -(-nbytes // 512)


def test_push_xfer_and_copy_roundtrip():
    with E.DpuSet(9, "nrDpusPerRank=4") as dpus:
        assert dpus.nr_dpus == 9 and dpus.nr_ranks == 3
        dpus.load(kernel("vector_add.c", nr_tasklets=2))
        rng = np.random.default_rng(3)
        blobs = [rng.integers(0, 256, 4096 + 8, dtype=np.uint8) for _ in range(9)]
        dpus.push(HEAP, blobs, offset=1 << 20)
        back = dpus.gather(HEAP, 4096 + 8, offset=1 << 20)
        for i in range(9):
            np.testing.assert_array_equal(back[i], blobs[i])
            # copy_from reads the same bytes, at any MRAM offset
            np.testing.assert_array_equal(dpus.copy_from(HEAP, 13, offset=(1 << 20) + 3, index=i), blobs[i][3:16])
        dpus.copy_to("DPU_INPUT_ARGUMENTS", np.array([5, 6], np.uint32), index=4)
        assert list(dpus.copy_from("DPU_INPUT_ARGUMENTS", 8, index=4).view(np.uint32)) == [5, 6]
        assert list(dpus.copy_from("DPU_INPUT_ARGUMENTS", 8, index=3).view(np.uint32)) == [0, 0]
        # the SDK's checks: symbol bounds, WRAM word alignment, unknown names, copy_from on a set
        with pytest.raises(E.DpuError, match="invalid symbol access"):
            dpus.copy_to("DPU_INPUT_ARGUMENTS", np.zeros(3, np.uint32))
        with pytest.raises(E.DpuError, match="invalid WRAM access"):
            dpus.copy_to("DPU_INPUT_ARGUMENTS", np.zeros(2, np.uint8), offset=2)
        with pytest.raises(E.DpuError, match="unknown symbol"):
            dpus.copy_to("no_such_symbol", np.zeros(8, np.uint8))
        with pytest.raises(E.DpuError, match="invalid symbol access"):
            dpus.copy_to(HEAP, np.zeros(16, np.uint8), offset=E.MRAM_SIZE - 8)
        code = E.lib.dpu_copy_from(dpus.set, b"DPU_INPUT_ARGUMENTS", 0, E.ffi.NULL, 0)
        assert code == E.lib.DPU_ERR_INVALID_DPU_SET


def test_each_dpu_has_its_own_globals_and_mram():
    with E.DpuSet(3) as dpus:
        dpus.load(kernel("vector_add.c", nr_tasklets=1))
        for i in range(3):
            dpus.copy_to("DPU_INPUT_ARGUMENTS", np.array([i, i], np.uint32), index=i)
            dpus.copy_to(HEAP, np.full(8, i, np.uint8), index=i)
        for i in range(3):
            assert list(dpus.copy_from("DPU_INPUT_ARGUMENTS", 8, index=i).view(np.uint32)) == [i, i]
            assert list(dpus.copy_from(HEAP, 8, index=i)) == [i] * 8


BAD_RULES = {
    1: ("MRAM address not 8-byte aligned", "mram_read"),
    2: ("DMA size out of [8, 2048] bytes", "2056 bytes"),
    3: ("DMA size not a multiple of 8", "12 bytes"),
    4: ("MRAM access out of bounds", "mram_read"),
    5: ("WRAM over budget", "mem_alloc(2048)"),
    6: ("WRAM address not 8-byte aligned", "mram_read"),
    7: ("DMA size out of [8, 2048] bytes", "0 bytes"),
}


@pytest.mark.parametrize("rule", sorted(BAD_RULES))
def test_bad_kernel_faults_with_rule_named(rule):
    name, detail = BAD_RULES[rule]
    nr_tasklets = 4
    with E.DpuSet(3) as dpus:
        dpus.load(kernel("bad_rules.c", nr_tasklets=nr_tasklets, defines={"RULE": rule}))
        with pytest.raises(E.DpuFaultError) as info:
            dpus.launch()
        message = str(info.value)
        assert f"rule '{name}'" in message and detail in message
        assert f"tasklet {nr_tasklets - 1}" in message and "DPU 0" in message
        assert re.search(r"bad_rules\.c:\d+", message)
        assert dpus.status() == (True, True)
        # every DPU faulted and says so; the waiting tasklets were stopped, not left hanging
        for i in range(3):
            assert f"DPU {i} (rank 0" in dpus.fault_message(i)
            assert name in dpus.log(i)
            assert list(dpus.copy_from("reached", 4, index=i).view(np.uint32)) == [0]
        # the synchronous launch reported its fault: as libdpu (dpu_thread_job_do_jobs) it
        # cleared the rank's job error, so a later dpu_sync has nothing to report
        dpus.sync()
        # an asynchronous launch reports the fault through dpu_sync (and dpu_status)
        dpus.launch(synchronous=False)
        with pytest.raises(E.DpuFaultError, match=re.escape(name)):
            dpus.sync()
        assert dpus.status() == (True, True)


def test_more_than_24_tasklets_is_refused_at_load():
    with E.DpuSet(2) as dpus:
        with pytest.raises(E.DpuError, match="more than 24 tasklets.*NR_TASKLETS=25"):
            dpus.load(kernel("vector_add.c", nr_tasklets=25))
        with pytest.raises(E.DpuFaultError, match="more than 24 tasklets"):
            dpus.launch()
        # the limit itself is fine (24 x (2 KB of blocks + 1 KB stack) would not fit WRAM: smaller stacks)
        dpus.load(kernel("vector_add.c", nr_tasklets=24, defines={"STACK_SIZE_DEFAULT": 256}))
        dpus.broadcast("DPU_INPUT_ARGUMENTS", np.array([0, 0], np.uint32))
        dpus.launch()


def test_globals_and_stacks_over_wram_budget_are_refused_at_load():
    with E.DpuSet(1) as dpus:
        with pytest.raises(E.DpuError, match="WRAM over budget.*16 tasklets x 1024-byte stacks"):
            dpus.load(kernel("wram_globals.c", nr_tasklets=16))
    with E.DpuSet(1) as dpus:
        dpus.load(kernel("wram_globals.c", nr_tasklets=4))   # 60000 + 4 KB fits
        dpus.launch()


def test_float_in_a_kernel_fails_the_build():
    with pytest.raises(E.KernelBuildError, match="poisoned|SSE"):
        kernel("uses_float.c", nr_tasklets=1)
    kernel("vector_add.c", nr_tasklets=3)                     # integer kernels build


def native_threads_and_fds():
    return len(os.listdir("/proc/self/task")), len(os.listdir("/proc/self/fd"))


def test_crash_and_deadlock_fault_the_dpu_without_hanging():
    before = native_threads_and_fds()
    with E.DpuSet(2) as dpus:
        dpus.load(kernel("crash.c", nr_tasklets=4))
        with pytest.raises(E.DpuFaultError, match="memory access violation.*tasklet 0"):
            dpus.launch()
        dpus.load(kernel("deadlock.c", nr_tasklets=4))
        with pytest.raises(E.DpuFaultError, match="rule 'deadlock'"):
            dpus.launch()
        dpus.launch(synchronous=False)              # left running: dpu_free waits for it
    assert native_threads_and_fds() == before       # no tasklet or worker thread, no kernel copy left


def test_log_perfcounter_and_mram_variables():
    with E.DpuSet(2) as dpus:
        dpus.load(kernel("log_and_perf.c", nr_tasklets=1))
        dpus.launch()
        for i in range(2):
            assert dpus.copy_from("read_back", 8, index=i).view(np.uint64)[0] == 0x1122334455667788
            # perfcounter: modelled DMA cycles, then DMA instructions (see perfcounter.h)
            assert dpus.copy_from("cycles", 8, index=i).view(np.uint64)[0] == 77 + 4 + 2 * (61 + 1024)
            assert dpus.copy_from("instructions", 8, index=i).view(np.uint64)[0] == 1
            np.testing.assert_array_equal(dpus.copy_from("mram_array", 4096, index=i).view(np.uint64),
                                          np.concatenate([np.arange(256), np.arange(256)]))
            assert "tasklet 0 done, clock 350000000" in dpus.log(i)


def test_mram_keeps_its_contents_across_dpu_load_but_for_the_new_programs_variables():
    """As libdpu's loader, which writes a program's own MRAM sections only: what the host or a
    kernel left in MRAM is still there for the next program (one binary per stage)."""
    pattern = np.frombuffer(b"pimloader-mram!!" * 4, np.uint8)
    far = 40 << 20
    with E.DpuSet(2) as dpus:
        dpus.load(kernel("vector_add.c", nr_tasklets=1))         # no __mram variables
        dpus.copy_to(HEAP, np.full(4096 + 64, 0xAB, np.uint8))   # where the next one's will be
        dpus.copy_to(HEAP, pattern, offset=far)
        dpus.load(kernel("log_and_perf.c", nr_tasklets=1))       # __mram variables first
        dpus.launch()
        for i in range(2):   # its initialised variable is its own, not the bytes left there
            assert dpus.copy_from("read_back", 8, index=i).view(np.uint64)[0] == 0x1122334455667788
            window = dpus.copy_from(HEAP, 16384, offset=far - 8192, index=i)
            assert pattern.tobytes() in window.tobytes()


def test_allocation_profiles_and_errors():
    with E.DpuSet(E.lib.DPU_ALLOCATE_ALL, "backend=emulator,nrDpus=5") as dpus:
        assert dpus.nr_dpus == 5
    with E.DpuSet(2, "nrDpusPerRank=1", ranks=True) as dpus:
        assert dpus.nr_dpus == 2 and dpus.nr_ranks == 2
    with pytest.raises(E.DpuError, match="invalid profile"):
        E.DpuSet(1, "backend=hw")
    with pytest.raises(E.DpuError, match="cannot allocate"):
        E.DpuSet(65)
    with E.DpuSet(1) as dpus:
        with pytest.raises(E.DpuError, match="no program loaded"):
            dpus.launch()
        with pytest.raises(E.DpuError, match="not found"):
            dpus.load("/nonexistent/kernel.so")


def test_async_launch_then_status_and_sync():
    with E.DpuSet(8) as dpus:
        dpus.load(kernel("histogram.c", nr_tasklets=16))
        nbytes = 200_000
        data = [np.full(nbytes, i, np.uint8) for i in range(8)]
        dpus.broadcast("nr_bytes", np.array([nbytes], np.uint32))
        dpus.push(HEAP, data)
        dpus.launch(synchronous=False)
        done, fault = dpus.status()
        assert not fault
        dpus.sync()
        assert dpus.status() == (True, False)
        # a transfer after an asynchronous launch waits for it, as the SDK's rank queue does
        for i in range(8):
            assert dpus.copy_from("histogram", 1024, index=i).view(np.uint32)[i] == nbytes


# -- libdpu's asynchronous operations: per-rank job queues ----------------------------------
# As src/backends/api/src/api/dpu_thread_job.c of the SDK: every operation on a rank is a
# job run in order by the rank's thread; a launch job ends when the rank's DPUs have stopped;
# ranks run their queues independently; a failed job's error sticks to the rank.

LONG = 6_000_000   # spins of ordered.c (~0.2 s); tests that need a launch not yet ended hold it (hold_launches)


def ordered(dpus, spins, stamps, fault=0):
    dpus.load(kernel("ordered.c", nr_tasklets=2))
    for i, (n, stamp) in enumerate(zip(spins, stamps)):
        dpus.copy_to("spins", np.array([n], np.uint32), index=i)
        dpus.copy_to("stamp", np.array([stamp], np.uint64), index=i)
    dpus.broadcast("fault", np.array([fault], np.uint32))


def test_transfers_queued_behind_an_async_launch_run_after_it():
    with E.DpuSet(2) as dpus:                     # one rank of 2 DPUs
        ordered(dpus, [LONG, 0], [0xAAAA, 0xCCCC])
        dpus.reset_counters()
        before = [np.zeros(8, np.uint8) for _ in range(2)]
        host = [np.frombuffer(np.array([0xBBBB], np.uint64).tobytes(), np.uint8).copy() for _ in range(2)]
        after = [np.zeros(8, np.uint8) for _ in range(2)]
        dpus.hold_launches(True)                  # the launch certainly has not ended below
        try:
            dpus.launch(synchronous=False)        # returns at once: the DPUs run in the background
            dpus.push(HEAP, before, to_dpu=False, asynchronous=True)   # the kernel's stamps
            dpus.push(HEAP, host, asynchronous=True)                   # then the host's word over them
            dpus.push(HEAP, after, to_dpu=False, asynchronous=True)
            assert dpus.queued_jobs() == 4        # the launch and the three transfers behind it
            deadline = time.monotonic() + 30      # the rank's thread starts the launch job when
            while dpus.nr_running() != 2 and time.monotonic() < deadline:  # it gets a core
                time.sleep(0.01)
            assert dpus.nr_running() == 2
        finally:
            dpus.hold_launches(False)
        dpus.sync()
        assert [b.view(np.uint64)[0] for b in before] == [0xAAAA, 0xCCCC]
        assert [b.view(np.uint64)[0] for b in after] == [0xBBBB, 0xBBBB]
        c = dpus.counters()                       # host-transfer counters count queued transfers
        assert (c.host_to_dpu_bytes, c.dpu_to_host_bytes, c.launches) == (16, 32, 2)
        assert c.mram_read_calls == LONG and c.mram_write_calls == 2


def test_a_dpu_of_a_running_rank_waits_for_the_rank():
    # the host cannot reach the MRAM of a rank while any of its DPUs runs (libdpu's
    # dpu_copy_to_mrams: DPU_ERR_MRAM_BUSY); through the queue, DPU 1's copy waits for DPU 0
    with E.DpuSet(2) as dpus:
        ordered(dpus, [LONG, 0], [1, 2])
        dpus.launch(synchronous=False)
        assert dpus.copy_from(HEAP, 8, index=1).view(np.uint64)[0] == 2
        assert dpus.nr_running() == 0             # DPU 0 had stopped before the copy ran
        assert dpus.copy_from(HEAP, 8, index=0).view(np.uint64)[0] == 1


def test_ranks_run_their_queues_independently():
    with E.DpuSet(2, "nrDpusPerRank=1") as dpus:  # two ranks of one DPU
        assert dpus.nr_ranks == 2
        ordered(dpus, [LONG, 0], [1, 2])
        dpus.hold_launches(True, target=dpus.rank(0))   # rank 0's launch cannot end until released
        try:
            dpus.launch(synchronous=False)
            dpus.sync(rank=1)                      # rank 1 is done ...
            assert dpus.queued_jobs(dpus.rank(0)) == 1  # ... while rank 0 still runs its launch
            assert dpus.copy_from(HEAP, 8, index=1).view(np.uint64)[0] == 2   # rank 1 serves the host
            deadline = time.monotonic() + 30      # rank 0's thread boots its launch when it gets a core
            while dpus.nr_running(dpus.rank(0)) != 1 and time.monotonic() < deadline:
                time.sleep(0.01)
            assert dpus.queued_jobs(dpus.rank(0)) == 1 and dpus.nr_running(dpus.rank(0)) == 1
        finally:
            dpus.hold_launches(False, target=dpus.rank(0))
        dpus.sync()
        assert dpus.copy_from(HEAP, 8, index=0).view(np.uint64)[0] == 1


def test_a_rank_holds_nr_jobs_per_rank_jobs():
    with E.DpuSet(1, "nrJobsPerRank=3") as dpus:
        ordered(dpus, [LONG], [1])
        words = [np.zeros(8, np.uint8) for _ in range(3)]
        dpus.hold_launches(True)                  # the launch keeps its slot until released
        try:
            dpus.launch(synchronous=False)
            dpus.push(HEAP, words[:1], to_dpu=False, asynchronous=True)
            dpus.push(HEAP, words[1:2], to_dpu=False, asynchronous=True)
            assert dpus.queued_jobs() == 3        # every slot taken, the launch not ended
        finally:
            dpus.hold_launches(False)
        dpus.push(HEAP, words[2:], to_dpu=False, asynchronous=True)   # waits for a free slot
        assert dpus.nr_running() == 0             # the launch had to end first
        dpus.sync()
        assert [w.view(np.uint64)[0] for w in words] == [1, 1, 1]


def test_a_failed_async_job_sticks_to_its_rank_and_drops_the_jobs_behind_it():
    with E.DpuSet(1) as dpus:
        ordered(dpus, [LONG], [5], fault=1)
        word = np.zeros(8, np.uint8)
        dpus.launch(synchronous=False)
        dpus.push(HEAP, [word], to_dpu=False, asynchronous=True)     # dropped: behind the fault
        dpus.wait_idle()                          # the launch failed before anyone synced
        for _ in range(2):                        # libdpu keeps the rank's error: every call gets it
            with pytest.raises(E.DpuFaultError, match=r"asynchronous operation error \(launch_rank\)") as info:
                dpus.sync()
            assert info.value.asynchronous and info.value.error == E.lib.DPU_ERR_DPU_FAULT
            assert "rule 'halt'" in info.value.detail
        with pytest.raises(E.DpuFaultError, match="launch_rank"):
            dpus.launch()
        assert word.view(np.uint64)[0] == 0       # the queued gather never ran
        assert dpus.status() == (True, True)


def test_a_sync_waiting_when_the_job_fails_gets_the_plain_error_and_clears_it():
    with E.DpuSet(1) as dpus:
        ordered(dpus, [LONG], [5], fault=1)
        import threading
        dpus.hold_launches(True)                  # the DPU cannot fault before the sync is queued
        dpus.launch(synchronous=False)

        def release_once_the_sync_is_queued():
            while dpus.queued_jobs() < 2:         # the launch, then the sync behind it
                time.sleep(0.001)
            dpus.hold_launches(False)

        releaser = threading.Thread(target=release_once_the_sync_is_queued)
        releaser.start()
        with pytest.raises(E.DpuFaultError, match="rule 'halt'") as info:
            dpus.sync()                           # queued while the DPU still ran
        releaser.join()
        assert not info.value.asynchronous and info.value.code == E.lib.DPU_ERR_DPU_FAULT
        dpus.sync()                               # cleared, as libdpu's dpu_thread_job_do_jobs does
        dpus.broadcast("fault", np.array([0], np.uint32))
        dpus.broadcast("spins", np.array([0], np.uint32))
        dpus.launch()
        assert dpus.copy_from(HEAP, 8).view(np.uint64)[0] == 5


def test_a_forked_child_can_drop_its_parents_dpus_without_hanging():
    # the rank threads stay in the parent: in the child, calls that need them fail, and
    # dpu_free only frees memory (a condition variable a parent thread waited on would block)
    with E.DpuSet(2) as dpus:
        ordered(dpus, [0, 0], [1, 2])
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                try:
                    dpus.launch()
                except E.DpuError as error:
                    code = 0 if error.error == E.lib.DPU_ERR_SYSTEM else 2
                dpus.close()
            finally:
                os._exit(code)
        for _ in range(1800):                       # a watchdog (90 s), not a deadline
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            time.sleep(0.05)
        else:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            pytest.fail("the child hung in dpu_free")
        assert os.waitstatus_to_exitcode(status) == 0
        dpus.launch()                               # the parent's DPUs are untouched
        assert dpus.copy_from(HEAP, 8, index=1).view(np.uint64)[0] == 2
