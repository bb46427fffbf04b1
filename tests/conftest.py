"""Test-wide settings: no network, no credentials, no account (see README, Testing)."""
from __future__ import annotations

import os
import shutil
import signal

import pytest

for _k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE",
           "CDK_DEFAULT_ACCOUNT"):
    os.environ.pop(_k, None)
os.environ.setdefault("AWS_EC2_METADATA_DISABLED", "true")
os.environ.setdefault("CDK_DISABLE_CLI_TELEMETRY", "true")
os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

REQUIRE_SYSTEM_DEPS = os.environ.get("KIT_REQUIRE_SYSTEM_DEPS") == "1"


def require_binary(path_or_name: str) -> str:
    """Path of a system binary a test needs. In CI (KIT_REQUIRE_SYSTEM_DEPS=1) a missing one
    fails the test, so a missing install step can never turn into a silent skip."""
    found = shutil.which(path_or_name) or (path_or_name if os.path.exists(path_or_name) else None)
    if found:
        return found
    msg = f"{path_or_name} not installed (make sysdeps installs it)"
    if REQUIRE_SYSTEM_DEPS:
        pytest.fail(msg)
    pytest.skip(msg)


def sigint_as_a_terminal_would() -> None:
    """``preexec_fn`` for a child that a test sends Ctrl-C (SIGINT). A process started as a
    background job of a non-interactive shell (``cmd &``, CI wrappers) inherits SIGINT *ignored*,
    and Python then installs no KeyboardInterrupt handler: the child would ignore the test's Ctrl-C
    (measured here: SigIgn 0x6 under ``setsid bash -c 'cmd' &``; harness.run then finished all 20
    runs with rc 0)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


# `make check`, the fast tier, skips the tests marked `slow` here (pyproject.toml's marker); `make
# test` and CI run everything. Taken from `pytest --durations=0 -n 2 --dist loadfile` on this 2-core
# machine (2026-12-07, load average 4-7 from other jobs): a test function is slow when its cases
# together took over ~2.5 s there (about 1 s quiet): real servers, subprocesses, sshd sessions,
# model loads, a synthesis of its own, a cdk, cfn-lint or shellcheck run, matplotlib pages. A file
# is slow as a whole when most of its tests are, or when the module fixture they share is (a
# model loaded into an engine, a synthesis with its own context). Kept in the fast tier whatever
# they cost: the stacks smoke subset (the whole app synthesized once with its assertions,
# tests/stacks/test_synth.py; the backend-row and subnet-plan tests) and the structure checks
# (the import graph, the docs check, the lean set).
#
# Whole files (not even imported by the fast tier: see pytest_ignore_collect).
SLOW_PATHS = (
    "tests/demo/", "tests/calibration/", "tests/package/test_build.py",
    "tests/package/test_stack.py", "tests/package/test_vllm_pin.py", "tests/accuracy/test_kit_engine.py",
    "tests/accuracy/test_cli.py", "tests/accuracy/test_lmeval.py", "tests/accuracy/test_run_stage.py",
    "tests/bench/test_locust.py", "tests/bench/test_refserver_runs.py", "tests/bench/test_hostile.py",
    "tests/harness/test_trial.py", "tests/harness/test_access.py", "tests/harness/test_tunnel_openssh.py",
    "tests/harness/test_tunnel_proc.py", "tests/harness/test_bench_remote.py", "tests/harness/test_run_hostile.py",
    "tests/harness/test_preflight_account.py", "tests/neuron/test_hostile.py", "tests/neuron/test_nxdi08.py",
    "tests/report/test_hostile.py", "tests/package/test_hostile_tensors.py", "tests/package/test_hostile_files.py",
    "tests/package/test_hostile_out.py", "tests/accuracy/test_deadline.py", "tests/report/test_scale.py",
    "tests/harness/test_url_credentials.py", "tests/neuron/test_port_check.py",
    "tests/neuron/test_sampling_api.py", "tests/accuracy/test_bos_offset.py", "tests/neuron/test_simulated.py",
    "tests/neuron/test_server_cpu.py", "tests/neuron/test_structured.py", "tests/neuron/test_completions.py",
    "tests/package/test_sizes.py",
    # tests/stacks: each of these runs boot scripts or image components for real, or synthesizes
    # the app again with its own context, in most of its tests. The rest of tests/stacks shares
    # the session's one synthesis (tests/stacks/conftest.py `kit`) or parses config only.
    "tests/stacks/test_new_row_collects.py", "tests/stacks/test_userdata.py",
    "tests/stacks/test_neuron_install_precompile.py", "tests/stacks/test_neuron_install.py",
    "tests/stacks/test_neuron_driver_hold.py", "tests/stacks/test_sizing.py", "tests/stacks/test_images_patch.py",
    "tests/stacks/test_variants.py", "tests/stacks/test_image_check_scope.py", "tests/stacks/test_model_revision.py",
    "tests/stacks/test_image_key.py", "tests/stacks/test_az_choice.py", "tests/stacks/test_regions_stacks.py",
    "tests/stacks/test_images_ready.py", "tests/stacks/test_images_components.py",
)
# Single test functions (every parametrized case of each) in files whose other tests are fast.
SLOW_TESTS: dict[str, tuple[str, ...]] = {
    "tests/accuracy/test_resume_hostile.py": (
        "test_a_damaged_run_json_is_one_line_before_anything_is_asked", "test_a_torn_last_line_loses_nothing_on_resume"),
    "tests/accuracy/test_unwritable.py": ("test_a_batch_cut_by_a_file_size_limit_keeps_its_whole_lines",),
    "tests/accuracy/test_variants_stage.py": ("test_three_precisions_one_command",),
    "tests/bench/test_cli.py": (
        "test_bad_input_is_one_line_and_nonzero", "test_the_benchmark_never_imports_torch_or_transformers",
        "test_time_limit_reached_exits_1_and_says_what_is_missing"),
    "tests/bench/test_nothing_measured.py": (
        "test_a_closed_port_exits_3_says_nothing_was_measured_and_keeps_the_records",
        "test_an_error_in_a_200_json_body_is_the_servers_error_with_its_message"),
    "tests/bench/test_path.py": ("test_cli_writes_path_rtt_into_every_level_and_bench_json",),
    "tests/bench/test_summarize_garbage.py": ("test_every_field_wrong_in_every_way_is_no_traceback",),
    "tests/cost/test_plan_cli.py": ("test_bad_input_is_one_line_and_exit_2",),
    "tests/cost/test_prices.py": ("test_ec2_pagination_follows_next_token_and_skips_capacity_blocks",),
    "tests/harness/test_discovery.py": ("test_discovery_from_cloudformation_on_moto",),
    "tests/harness/test_command_door.py": ("test_a_bad_option_value_is_one_line_never_a_traceback",),
    "tests/harness/test_discovery_variants.py": (
        "test_a_variant_is_looked_for_in_its_backends_region", "test_variant_stacks_on_moto"),
    "tests/harness/test_leftovers.py": ("test_a_check_that_cannot_run_is_not_a_proof",),
    "tests/harness/test_misleading_args.py": ("test_a_dataset_that_cannot_be_reached_is_one_line_quickly",),
    "tests/harness/test_regions.py": ("test_discovery_looks_for_each_backend_in_its_own_region",),
    "tests/harness/test_preflight.py": (
        "test_all_ready_in_us_east_1", "test_configured_az_and_instance_overrides_are_what_is_checked",
        "test_g5g_not_offered_in_us_east_2_blocks_only_g5g", "test_gpu_family_sweep_checks_each_types_quota",
        "test_no_bootstrap_and_bedrock_not_entitled_block", "test_quota_summed_over_selected_stacks",
        "test_zero_quota_and_unreadable_quota"),
    "tests/harness/test_preflight_shared_image.py": ("test_a_shared_image_that_holds_no_weights_still_needs_the_token",),
    "tests/harness/test_preflight_variants.py": (
        "test_each_twin_is_priced_on_its_own_type", "test_ec2_twins_sum_their_own_vcpus_in_one_quota_class",
        "test_sagemaker_endpoints_of_one_type_count_against_its_quota", "test_variants_count_against_the_vcpu_quota"),
    "tests/harness/test_preflight_weights.py": (
        "test_a_pin_the_neuron_image_does_not_hold_is_a_warning_with_both_commits",
        "test_an_image_built_unpinned_cannot_prove_the_pin", "test_the_pin_the_image_holds_no_warning",
        "test_unpinned_backends_show_the_image_commit_or_newest_at_deploy_time"),
    "tests/kit/test_models.py": ("test_counts_match_transformers_layer_by_layer",),
    "tests/kit/test_regions_context.py": ("test_the_cdk_cli_reads_the_same_context",),
    "tests/neuron/test_cli.py": ("test_bad_input_is_one_line_and_exit_2", "test_runs_from_an_installed_copy_of_the_directory"),
    "tests/neuron/test_continuous.py": ("test_a_request_joining_a_busy_batch_starts_at_once_with_the_tokens_it_gets_alone",),
    "tests/neuron/test_stops.py": ("test_random_pieces_match_the_reference_and_never_stream_a_stop_prefix",),
    "tests/neuron/test_toolcalls.py": ("test_every_split_gives_the_same_result",),
    "tests/package/test_remote.py": ("test_the_project_is_built_with_the_environment_whose_quota_is_checked",),
    "tests/package/test_resident.py": ("test_vllm_holds_the_package_bytes_less_merged_shape_tensors",),
    "tests/report/test_accuracy_ranges.py": (
        "test_a_backend_out_of_range_is_left_out_and_named", "test_a_pair_out_of_range_is_left_out_and_named",
        "test_the_issues_case_from_the_command_line"),
    "tests/report/test_families.py": ("test_section_in_both_pages",),
    "tests/report/test_report.py": (
        "test_an_endpoint_server_is_not_called_managed", "test_bad_results_dir_is_one_line_and_non_zero",
        "test_cli_writes_both_files", "test_epoch_timestamps_from_harness_run_render_as_utc",
        "test_existing_cost_json_is_used_as_saved", "test_full_run_renders_markdown_and_self_contained_html",
        "test_html_renders_in_headless_chromium", "test_knee_skips_a_level_cut_short",
        "test_malformed_files_render_instead_of_crashing", "test_only_bench",
        "test_results_saved_before_the_protocol_rename_render_the_same",
        "test_results_written_before_the_metric_and_service_renames_render_the_same",
        "test_unwritable_results_dir_is_one_line"),
    "tests/report/test_variants_report.py": ("test_every_table_labels_variants_with_model_and_scheme",),
    "tests/report/test_versions.py": (
        "test_a_newer_kits_files_render_with_a_note", "test_an_old_results_directory_renders_as_a_new_one",
        "test_old_words_in_meta_still_render"),
    "tests/report/test_weights_report.py": (
        "test_a_commit_not_known_is_said_not_flagged", "test_a_run_from_before_weights_were_recorded_says_so",
        "test_one_commit_no_warning", "test_same_commit_other_files_are_flagged",
        "test_two_commits_of_one_model_are_flagged_with_both"),
    # tests/stacks: a cdk synth or cfn-lint in a subprocess, or a synthesis of their own.
    "tests/stacks/test_apt_locks.py": (
        "test_the_components_apt_step_waits_for_the_lists_lock_apt_does_not_wait_for", "test_the_user_datas_install_waits_too"),
    "tests/stacks/test_awsdata.py": ("test_app_refuses_in_one_line_exit_2",),
    "tests/stacks/test_cli.py": ("test_unknown_backend_is_one_line_naming_it_and_the_valid_ids",),
    "tests/stacks/test_config_limits.py": ("test_the_app_refuses_in_one_line_exit_2",),
    "tests/stacks/test_ec2_backends.py": (
        "test_guardrails_can_be_disabled_and_clamped", "test_instance_logical_id_does_not_depend_on_token_numbering"),
    "tests/stacks/test_images.py": ("test_x86_instance_type_for_g5g_fails_synth_in_one_line",),
}


def stale_slow_entries(root) -> list[str]:
    """Entries above that name no file, or a test function its file no longer defines: a renamed
    test would otherwise drop back into the fast tier without anyone noticing."""
    import ast
    from pathlib import Path

    out = [f"SLOW_PATHS names {p}, which does not exist" for p in SLOW_PATHS if not (Path(root) / p).exists()]
    for path, names in SLOW_TESTS.items():
        file = Path(root) / path
        if not file.exists():
            out.append(f"SLOW_TESTS names {path}, which does not exist")
            continue
        defined = {n.name for n in ast.parse(file.read_text()).body
                   if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
        out += [f"SLOW_TESTS names {path}::{n}, which that file does not define" for n in names if n not in defined]
    return out


def is_slow(nodeid: str) -> bool:
    path, _, rest = nodeid.partition("::")
    return path.startswith(SLOW_PATHS) or rest.partition("[")[0] in SLOW_TESTS.get(path, ())


def pytest_ignore_collect(collection_path, config):
    """In the fast tier (`-m "not slow"`) a file that is slow as a whole is not even imported: its
    imports (torch, compressed-tensors, ...) would cost each worker seconds of collection."""
    if config.getoption("markexpr", "") != "not slow":
        return None
    rel = collection_path.relative_to(config.rootpath).as_posix() + ("/" if collection_path.is_dir() else "")
    return True if rel.startswith(SLOW_PATHS) else None


def pytest_collection_modifyitems(config, items):
    stale = stale_slow_entries(config.rootpath)
    if stale:
        raise pytest.UsageError("tests/conftest.py: " + "; ".join(stale))
    for item in items:
        if is_slow(item.nodeid):
            item.add_marker(pytest.mark.slow)


def saved_levels(path) -> list:
    """The levels of a summary.json the kit wrote, which carries its contract's schema_version
    first (kit/contracts/results.py BENCH_SUMMARY)."""
    import json
    from pathlib import Path

    from kit.contracts.results import BENCH_SUMMARY

    data = json.loads(Path(path).read_text())
    assert isinstance(data, dict) and list(data)[:2] == ["schema_version", "levels"], str(data)[:200]
    assert data["schema_version"] == BENCH_SUMMARY.version
    return data["levels"]
