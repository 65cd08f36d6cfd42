"""How many builds and compiles run at once, from cores, memory and MAX_JOBS."""

from kernel_matrix.planning.resources import GIB, Parallelism, plan_parallelism


def test_cores_are_shared_out_between_builds():
    assert plan_parallelism(n_cores=16, memory=64 * GIB, max_jobs="") == Parallelism(8, 2)
    assert plan_parallelism(2, n_cores=16, memory=64 * GIB, max_jobs="") == Parallelism(2, 8)
    assert plan_parallelism(n_cores=2, memory=24 * GIB, max_jobs="") == Parallelism(1, 2)


def test_memory_caps_the_compiles_a_many_core_machine_starts():
    # 64 cores but 6 GiB free: four compiles of 1.5 GiB fit.
    assert plan_parallelism(1, n_cores=64, memory=6 * GIB, max_jobs="") == Parallelism(1, 4)
    assert plan_parallelism(1, n_cores=64, memory=GIB // 2, max_jobs="") == Parallelism(1, 1)


def test_max_jobs_caps_the_total_and_builds_never_exceed_the_cells():
    assert plan_parallelism(n_cores=32, memory=256 * GIB, max_jobs="4") == Parallelism(2, 2)
    assert plan_parallelism(n_cores=32, memory=256 * GIB, max_jobs="4", at_most=1) == Parallelism(1, 4)
    # More builds than slots: each still gets one compile.
    assert plan_parallelism(8, n_cores=2, memory=24 * GIB, max_jobs="") == Parallelism(8, 1)


def test_nvcc_threads_use_only_the_slots_the_compiles_leave_idle():
    assert Parallelism(builds=1, compiles=16).nvcc_threads(4) == 4
    assert Parallelism(builds=1, compiles=2).nvcc_threads(4) == 1
    assert Parallelism(builds=1, compiles=16).nvcc_threads(0) == 16
