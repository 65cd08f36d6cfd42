"""Which tests CI's gate leaves to the full run, and why.

`scripts/test` (README's test command, what `.ci/run` and ci.yml's push and pull-request job
run) must stay under 12 minutes on 2 cores; the whole suite takes about 40 there, 3655 s of
worker time of it in the tests that build, need the container engine or build the corpus.
The gate keeps every test of the fast loop, nearly all that start a process, and of the
building ones at least one per path: a native build, loaded and its suite run (`built`); a
cell built in a container and loaded on the host; publish and reuse against the Hub stand-in;
verify of signatures; the container's confinement; each supported loader version installed
beside ours, planning and testing a variant. What it leaves out below is the same paths again
with another kernel, edition, cache state or workflow: seconds to minutes each.

`scripts/test --full` runs everything (what ci.yml runs on main, nightly and by hand, and
what a session runs before it stops): these are marked `full`, and a key below that
names no test fails tests/project/test_tiers.py. Seconds: a full run on 2 cores at e4b64c2."""

from __future__ import annotations

# A module, a test of it (every parameter) or one parameter -> why it waits for the full run.
# Only the tests of a key that build, need the engine, build the corpus or start Python are
# left out: the fast loop's tests of a module stay in the gate.
FULL_ONLY = {
    # Workflow replays: every `run:` line of build.yml and the caller as GitHub runs them.
    "tests/end_to_end/test_first_run.py": "a push and a tag run of three repositories, cold container builds, installs from git: relu 182 s, maxsim (a CUDA cell) 374 s, relu and activation 511 s (full run at 8d40ef7)",
    "tests/end_to_end/test_adoption.py": "build.yml's replay (201 s) and a repository of two kernels adopting kernel-matrix (311 s)",
    # The README's and docs' commands, verbatim (the gate checks that each has a test).
    "tests/end_to_end/test_readme.py::test_the_main_command_builds_and_tests": "a clone's own native build and suite: 122 s",
    "tests/end_to_end/test_readme.py::test_the_commands_for_your_kernel": "relu's folder built, tested and checked: 73 s",
    "tests/end_to_end/test_readme.py::test_the_container_and_wheel_commands": "a cell and a wheel: 43 s",
    "tests/project/test_packaging.py::test_the_release_smoke_test_installs_the_wheel_and_runs_it": "74 s",
    "tests/project/test_packaging.py::test_the_readme_commands_for_your_kernels_repository_from_git": "15 s",
    # The whole suite of img2gray (its exhaustive CPU check) again, against the CUDA variant: on a
    # machine without a GPU it runs what the CPU variant's run does.
    "tests/checking/test_kernel_suite.py::test_kernel_suite_passes_against_the_built_variant[cuda]": "43 s",
    # README's main command and relu's commands again, by the kernel-matrix installed beside each loader
    # (the gate installs each loader and tests a built variant with it).
    "tests/checking/test_loader_versions.py::test_the_readmes_commands_pass_with_the_loader": "img2gray's CPU build and whole suite, relu's build, test and check-abi: 106-156 s per loader (beside other runs)",
    # Other kernels, and other editions of them (the gate builds img2gray).
    "tests/end_to_end/test_corpus.py": "the corpus's CPU-buildable cells and their own suites: 260 s",
    "tests/config/test_edition6.py::test_corpus_kernels_in_edition_6_build_their_cpu_variant": "eight corpus kernels' CPU variants, relu's and einops' suites: 38-133 s each, 531 s together (beside other runs)",
    "tests/end_to_end/test_real_kernels.py": "a matrix of two real kernels built once for its tests (124 s in the gate's run), and its tests: 170 s",
    "tests/checking/test_kernel_suite.py::test_relus_cpu_suite_still_runs_on_the_cpu_job_and_fails_a_broken_variant": "95 s",
    "tests/checking/test_kernel_suite.py::test_activations_cuda_variant_on_the_cpu_job_is_loaded_and_its_suite_said_to_need_a_gpu": "45 s",
    "tests/checking/test_kernel_suite.py::test_a_cuda_only_kernels_variant_without_a_gpu_is_loaded_and_its_suite_not_run": "49 s",
    "tests/checking/test_kernel_suite.py::test_test_finds_the_variant_a_python_only_kernel_was_built_as": "four Python-only kernels: 40 s",
    "tests/end_to_end/test_several_kernels.py::test_native_build_test_clean_and_publish_of_two_kernels": "36 s",
    "tests/building/test_sections.py": "kernels of several sections: 44 s",
    "tests/building/test_genex.py": "a kernel with CMake generator expressions: 21 s",
    "tests/building/test_dependencies.py::test_every_compile_sees_every_sections_dependencies_the_binding_too": "18 s",
    "tests/building/test_tvm_ffi.py::test_a_tvm_ffi_kernel_builds_loads_and_passes_its_own_suite": "47 s",
    "tests/building/test_tvm_ffi.py::test_published_tvm_ffi_variants_are_what_get_kernel_picks": "34 s",
    # init's matrix of each corpus kernel: the gate keeps relu (CPU and CUDA), activation (x86
    # flags) and cutlass-gemm (CUDA only, a dependency); the others are the same path.
    "tests/adopting/test_init_runners.py::test_no_job_of_a_corpus_kernel_targets_a_runner_its_author_did_not_give[ErikKaum/maxsim]": "3 s",
    "tests/adopting/test_init_runners.py::test_no_job_of_a_corpus_kernel_targets_a_runner_its_author_did_not_give[huggingface-kernels/symbol-conflicts]": "3 s",
    "tests/adopting/test_init_runners.py::test_no_job_of_a_corpus_kernel_targets_a_runner_its_author_did_not_give[huggingface-kernels/symbol-conflicts2]": "3 s",
    "tests/adopting/test_init_runners.py::test_no_job_of_a_corpus_kernel_targets_a_runner_its_author_did_not_give[kernels-community/causal-conv1d]": "3 s",
    "tests/adopting/test_init_runners.py::test_no_job_of_a_corpus_kernel_targets_a_runner_its_author_did_not_give[kernels-community/einops]": "3 s",
    "tests/adopting/test_init_runners.py::test_no_job_of_a_corpus_kernel_targets_a_runner_its_author_did_not_give[kernels-community/layer-norm]": "3 s",
    "tests/adopting/test_init_runners.py::test_no_job_of_a_corpus_kernel_targets_a_runner_its_author_did_not_give[kernels-community/megablocks]": "3 s",
    "tests/adopting/test_init_runners.py::test_no_job_of_a_corpus_kernel_targets_a_runner_its_author_did_not_give[kernels-community/punica-sgmv]": "3 s",
    "tests/adopting/test_init_runners.py::test_no_job_of_a_corpus_kernel_targets_a_runner_its_author_did_not_give[kernels-community/quantization-gptq]": "3 s",
    "tests/adopting/test_init_runners.py::test_no_job_of_a_corpus_kernel_targets_a_runner_its_author_did_not_give[kernels-community/rotary]": "3 s",
    # Builds again, cold or from other folders (reproducibility, the cache, the namespace), and
    # verify's rebuilds of them (the gate verifies signatures: tests/releasing/test_signatures.py).
    "tests/building/test_reproducible.py": "three builds per backend made for its tests (50 s for the CPU ones in the gate's run), rebuilt by verify: 290 s",
    "tests/building/test_objcache.py::test_changing_one_source_recompiles_only_it_and_renames_the_namespace": "35 s",
    "tests/building/test_objcache.py::test_each_build_records_what_its_compiles_are_looked_up_by": "four builds: 27 s",
    "tests/building/test_native_build.py::test_sources_compile_as_kernel_builders_release_target_does": "27 s",
    "tests/building/test_native_build.py::test_changed_sources_give_a_new_namespace": "26 s",
    "tests/building/test_native_build.py::test_a_build_request_makes_exactly_that_cell_or_nothing": "19 s",
    "tests/building/test_native_build.py::test_a_failed_build_keeps_the_previous_variant_and_leaves_nothing_partial": "15 s",
    "tests/building/test_native_build.py::test_a_compiler_that_links_libstdcxx_statically_is_refused": "15 s",
    "tests/building/test_builder_checks.py::test_a_variant_that_does_not_load_fails_the_build_and_keeps_the_built_one": "20 s",
    "tests/building/test_builder_checks.py::test_python_only_variants_of_backends_this_torch_does_not_load_get_one_note": "four backends' variants: 13-22 s",
    "tests/cli/test_cli.py::test_test_with_a_python_that_does_not_exist_is_one_line": "50 s",
    "tests/adopting/test_init.py::test_build_test_check_abi_and_clean_from_a_kernels_folder": "65 s",
    # Containers beyond the one cell the gate builds.
    "tests/containers/test_container_build.py::test_a_dependencys_headers_reach_the_build_container": "64 s",
    "tests/containers/test_container_build.py::test_rebuilding_reuses_the_images_and_skips_what_is_built": "65 s",
    "tests/containers/test_container_build.py::test_the_newest_torchs_pypi_cuda_cell_builds_in_its_container_and_passes_the_abi_check": "36 s",
    "tests/containers/test_container_build.py::test_a_tvm_ffi_cell_builds_in_the_offline_builder_up_to_its_abi_gate": "13 s",
    "tests/security/test_cache_poisoning.py": "two kernels' container builds sharing a cache: 80 s",
    "tests/security/test_hostile_inputs_round4_cache.py": "planted objects and a deps cache edited between builds: 43 s",
    "tests/security/test_index_attacks.py::test_no_installed_code_reaches_a_network_or_the_callers_pip_settings": "30 s",
    # Publish, reuse, verify and wheels again (the gate keeps one of each).
    "tests/releasing/test_reuse.py::test_a_published_variant_built_from_the_same_inputs_is_reused_and_anything_else_is_built": "139 s",
    "tests/releasing/test_signatures.py::test_a_signed_release_on_the_hub_verifies_and_a_tampered_file_is_named": "14 s",
    "tests/building/test_wheels.py::test_cibuildwheel_makes_a_repaired_wheel_that_installs_and_passes_the_suite": "46 s",
    "tests/building/test_wheels.py::test_pip_accepts_the_matching_wheel_and_refuses_the_wrong_torch": "15 s",
    # A compiler's escapes (a build with a hostile #error); the gate keeps a container's failure line escaped.
    "tests/security/test_hostile_inputs_round4_buildfolder.py::test_an_escape_sequence_in_a_compilers_output_is_printed_escaped": "20 s",
}


def full_only(nodeid: str) -> bool:
    """Whether a test (its pytest node id) waits for the full run."""
    return any(nodeid == key or nodeid.startswith((key + "::", key + "[")) for key in FULL_ONLY)
