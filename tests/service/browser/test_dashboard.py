"""The dashboard against a real server in headless Chromium: sign in (and a wrong key, and the
keyboard alone), upload, the graph and a kernel's IR stages, a tuning job's curve growing live,
compile and download (checked byte for byte), the records, and a narrow screen. Each page is saved
as a screenshot (see conftest.py for where)."""

from __future__ import annotations

import base64
import hashlib
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.service.browser.harness import Dashboard, Watched

# what a refused request logs in the console: expected where the test sends a wrong key
REFUSED = ("status of 401",)
TERMINAL = ("succeeded", "failed", "cancelled")


def sign_in(watched: Watched, dashboard: Dashboard) -> None:
    page = watched.page
    page.goto(dashboard.url)
    page.get_by_label("API key").fill(dashboard.key)
    page.get_by_role("button", name="Sign in").click()
    page.locator("#nav").wait_for(state="visible")
    page.locator("#models-list").wait_for()


def upload_via_api(dashboard: Dashboard, name: str) -> dict[str, Any]:
    with dashboard.api() as api:
        files = {"file": (f"{name}.onnx", dashboard.model_bytes, "application/octet-stream")}
        response = api.post("/v1/models", files=files, data={"name": name})
        response.raise_for_status()
        return dict(response.json())


def screenshot(watched: Watched, screenshots: Path, name: str) -> Path:
    path = screenshots / f"{name}.png"
    watched.page.screenshot(path=str(path), full_page=True)
    assert path.stat().st_size > 10_000, path
    return path


def poll(check: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.25)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def assert_key_never_in_a_url(watched: Watched, key: str) -> None:
    assert watched.urls, "the page made no requests"
    assert not [u for u in watched.urls if key in u], "the API key appeared in a URL"


def test_wrong_key_shows_an_error_and_no_data(
    dashboard: Dashboard, open_page: Callable[..., Watched], screenshots: Path
) -> None:
    upload_via_api(dashboard, "secret-model")  # data a stranger must not see
    watched = open_page()
    page = watched.page
    page.goto(dashboard.url)
    page.get_by_label("API key").fill("tk_not-a-real-key")
    page.get_by_role("button", name="Sign in").click()
    error = page.locator("#sign-in-error")
    error.wait_for(state="visible")
    assert "invalid or revoked API key" in error.inner_text()
    assert "Sign-in failed" in error.inner_text()
    assert page.locator("#nav").is_hidden() and page.locator("#page").inner_html() == ""
    assert "secret-model" not in page.content()
    assert page.evaluate("sessionStorage.length") == 0
    screenshot(watched, screenshots, "sign-in-wrong-key")

    # a stored key the server no longer accepts (revoked): signed out at the first request, no data
    page.evaluate("sessionStorage.setItem('temper.apiKey', 'tk_revoked')")
    page.goto(f"{dashboard.url}#/models")
    page.reload()
    error.wait_for(state="visible")
    assert "invalid or revoked API key" in error.inner_text()
    assert "secret-model" not in page.content() and page.locator("#nav").is_hidden()
    assert watched.unexpected_errors(allowed=REFUSED) == []


def test_keyboard_only_sign_in(dashboard: Dashboard, open_page: Callable[..., Watched]) -> None:
    watched = open_page()
    page = watched.page
    page.goto(dashboard.url)
    page.locator("#sign-in").wait_for(state="visible")
    assert page.evaluate("document.activeElement.id") == "api-key"  # the page starts in the key field
    visited = []
    for _ in range(12):  # once round the page: the button, the footer's links, the skip link, ...
        page.keyboard.press("Tab")
        visited.append(page.evaluate("document.activeElement.id || document.activeElement.textContent"))
        if visited[-1] == "api-key":
            break
    else:
        pytest.fail(f"Tab never came back to the API key field: {visited}")
    assert "Sign in" in visited and "Skip to content" in visited, visited
    outline = page.evaluate("getComputedStyle(document.activeElement).outlineStyle")
    assert outline != "none", "keyboard focus is not visible"
    page.keyboard.type(dashboard.key)
    page.keyboard.press("Enter")
    page.locator("#nav").wait_for(state="visible")
    assert page.evaluate("location.hash") == "#/models"

    assert page.evaluate("document.activeElement.textContent") == "Models"  # focus moved to the page's title
    # the nav works from the keyboard too: back (Shift+Tab) past "Sign out" to a link, Enter follows it
    visited = []
    for _ in range(6):
        page.keyboard.press("Shift+Tab")
        visited.append(page.evaluate("document.activeElement.textContent"))
        if visited[-1] == "Tuning jobs":
            break
    else:
        pytest.fail(f"Shift+Tab never reached the 'Tuning jobs' link: {visited}")
    assert visited[0] == "Sign out", visited
    page.keyboard.press("Enter")
    page.get_by_role("heading", name="Tuning jobs", level=1).wait_for()
    assert page.evaluate("location.hash") == "#/tuning"
    assert_key_never_in_a_url(watched, dashboard.key)
    assert watched.unexpected_errors() == []


def test_upload_by_file_picker_and_drop_list_and_delete(
    dashboard: Dashboard, open_page: Callable[..., Watched], screenshots: Path, tmp_path: Path
) -> None:
    watched = open_page()
    page = watched.page
    sign_in(watched, dashboard)
    model_file = tmp_path / "picked.onnx"
    model_file.write_bytes(dashboard.model_bytes)
    page.get_by_label("ONNX model file").set_input_files(str(model_file))
    page.get_by_role("button", name="Upload").click()
    card = page.locator("article.model", has_text="picked")
    card.wait_for()
    card.get_by_text("5 tasks (kernels)").click()  # the summary of the tasks table
    tasks = card.locator("table tbody tr")
    assert tasks.count() == 5
    assert "fused_conv2d_nchwc_add_relu_1" in card.inner_text() and "601 kFLOP" in card.inner_text()

    # drag and drop: a file dropped on the zone is the one uploaded
    data = base64.b64encode(dashboard.model_bytes).decode()
    transfer = page.evaluate_handle(
        """(data) => {
            const bytes = Uint8Array.from(atob(data), (c) => c.charCodeAt(0));
            const transfer = new DataTransfer();
            transfer.items.add(new File([bytes], "dropped.onnx"));
            return transfer;
        }""",
        data,
    )
    page.locator(".drop-zone").dispatch_event("drop", {"dataTransfer": transfer})
    assert "dropped.onnx" in page.locator(".chosen").inner_text()
    page.get_by_label("Name (optional)").fill("dropped-model")
    page.get_by_role("button", name="Upload").click()
    dropped = page.locator("article.model", has_text="dropped-model")
    dropped.wait_for()
    screenshot(watched, screenshots, "models")

    dropped.get_by_role("button", name="Delete").click()
    dropped.get_by_role("button", name="Yes, delete dropped-model").click()
    dropped.wait_for(state="detached")
    with dashboard.api() as api:
        assert "dropped-model" not in [m["name"] for m in api.get("/v1/models").json()]
    assert_key_never_in_a_url(watched, dashboard.key)
    assert watched.unexpected_errors() == []


def test_model_detail_lists_fused_groups_and_shows_a_kernels_stages(
    dashboard: Dashboard, open_page: Callable[..., Watched], screenshots: Path
) -> None:
    model = upload_via_api(dashboard, "detail")
    watched = open_page()
    page = watched.page
    sign_in(watched, dashboard)
    page.goto(f"{dashboard.url}#/models/{model['id']}")
    listing = page.locator(".graph-listing")
    listing.wait_for()
    assert listing.locator("li.group").count() == len(model["tasks"])
    # clicking an ONNX node shows the kernel that runs it
    listing.locator(".node-button", has_text="relu").click()
    panel = page.locator(".kernel-panel")
    panel.wait_for()
    assert panel.get_attribute("data-kernel") == "fused_conv2d_nchwc_add_relu_1"
    facts = panel.locator("dl.facts").inner_text()
    for expected in ("Implementation", "conv2d_nchwc", "Schedule source", "FLOPs", "601 kFLOP"):
        assert expected in facts
    assert panel.locator("table").inner_text().count("tile_order") == 1  # the decisions
    output = panel.locator(".ir-output")
    page.wait_for_selector(".ir-output[data-stage=scheduled][data-loaded=true]")
    code = output.locator("pre code")
    assert "@prim_func" in code.inner_text() and "fused_conv2d_nchwc_add_relu_1" in code.inner_text()
    assert code.locator("span.hljs-keyword").count() > 0, "the scheduled TIR is not highlighted"
    assert "/kernel/fused_conv2d_nchwc_add_relu_1" in page.evaluate("location.hash")
    screenshot(watched, screenshots, "model-detail-scheduled-tir")

    for stage, marker in (("llvm", "define"), ("asm", "fused_conv2d_nchwc_add_relu_1:"), ("graph", "conv")):
        panel.get_by_role("button", name=stage, exact=True).click()
        page.wait_for_selector(f".ir-output[data-stage={stage}][data-loaded=true]")
        assert marker in output.locator("pre code").inner_text(), stage
        assert panel.get_by_role("button", name=stage, exact=True).get_attribute("aria-pressed") == "true"
    screenshot(watched, screenshots, "model-detail-graph-stage")
    assert_key_never_in_a_url(watched, dashboard.key)
    assert watched.unexpected_errors() == []


def test_tuning_job_curve_grows_live(
    dashboard: Dashboard, open_page: Callable[..., Watched], screenshots: Path
) -> None:
    upload_via_api(dashboard, "tuned")
    watched = open_page()
    page = watched.page
    sign_in(watched, dashboard)
    page.get_by_role("navigation").get_by_role("link", name="Tuning jobs").click()
    page.get_by_role("button", name="Start tuning").wait_for()
    choice = page.locator("select option", has_text="tuned").inner_text()
    page.get_by_label("Model", exact=True).select_option(label=choice)
    # 8 trials in rounds of 2 over the model's 5 kernels: every kernel measured, several rounds
    page.get_by_label("Trials", exact=True).fill("8")
    page.get_by_label("Batch", exact=True).fill("2")
    page.get_by_role("button", name="Start tuning").click()
    detail = page.locator(".job-detail")
    detail.wait_for()
    job_id = page.evaluate("location.hash").rsplit("/", 1)[1]
    curve = page.locator("figure.curve")
    seen: list[tuple[str | None, str | None]] = []

    def points() -> int:
        seen.append((detail.get_attribute("data-state"), curve.get_attribute("data-points")))
        return int(curve.get_attribute("data-points") or 0)

    poll(lambda: points() >= 2, 240, "the tuning curve to reach 2 points")
    states = {state for state, _ in seen}
    assert states & {"queued", "running"} or len({p for _, p in seen}) > 1, seen  # it grew while we watched
    poll(lambda: detail.get_attribute("data-state") in TERMINAL, 240, "the tuning job to finish")
    assert detail.get_attribute("data-state") == "succeeded", detail.inner_text()
    assert page.locator(".curve canvas").count() == 1
    text = detail.inner_text()
    assert "budget: 8 trial(s) measured" in text  # the stop reason
    assert "In-model confirmation" in text
    screenshot(watched, screenshots, "tuning-whole-model")

    # per task against wall time: one series per kernel, a point per kernel's measured round at least
    page.get_by_label("Per task").check()
    page.get_by_label("Wall time").check()
    assert curve.get_attribute("data-view") == "tasks" and curve.get_attribute("data-axis") == "time"
    assert int(curve.get_attribute("data-points") or 0) >= 5
    screenshot(watched, screenshots, "tuning-per-task-wall-time")

    with dashboard.api() as api:
        job = api.get(f"/v1/tuning-jobs/{job_id}").json()
    assert job["state"] == "succeeded" and job["progress"]["trials_done"] == 8
    assert_key_never_in_a_url(watched, dashboard.key)
    assert watched.unexpected_errors() == []


def test_cancel_a_tuning_job(dashboard: Dashboard, open_page: Callable[..., Watched]) -> None:
    model = upload_via_api(dashboard, "cancelled")
    watched = open_page()
    page = watched.page
    sign_in(watched, dashboard)
    page.goto(f"{dashboard.url}#/tuning?model={model['id']}")
    page.get_by_role("button", name="Start tuning").wait_for()
    assert page.get_by_label("Model", exact=True).input_value() == model["id"]
    page.get_by_label("Trials", exact=True).fill("5000")
    page.get_by_label("Time budget (seconds, optional)").fill("600")
    page.get_by_label("Batch", exact=True).fill("2")
    page.get_by_role("button", name="Start tuning").click()
    detail = page.locator(".job-detail[data-state]")
    detail.wait_for()
    assert "time_budget_s=600" in detail.inner_text()
    detail.get_by_role("button", name="Cancel").click()
    poll(lambda: detail.get_attribute("data-state") in TERMINAL, 240, "the cancelled job to stop")
    assert detail.get_attribute("data-state") == "cancelled"
    assert "cancelled" in page.locator("#tuning-list").inner_text()
    assert watched.unexpected_errors() == []


def test_curve_reads_old_and_partial_progress(
    dashboard: Dashboard, open_page: Callable[..., Watched]
) -> None:
    """Jobs from before wall times were recorded ([trials, latency] points), unknown latencies, no
    reference latencies, no task curves: the chart draws what there is and says what is missing."""
    watched = open_page()
    page = watched.page
    page.goto(dashboard.url)
    result = page.evaluate(
        """async () => {
            const curve = await import("./static/dashboard/curve.js");
            const old = {
                curve: [[5, null], [7, 0.002], [9, 0.0015]],
                tasks: [{name: "a", curve: [[1, 0.001]]}, {name: "b"}],
            };
            const fresh = {
                curve: [[4, 0.003, 1.5], [6, 0.002, 2.5]],
                default_latency_s: 0.003,
                onnxruntime_latency_s: null,
                tasks: [{name: "a", curve: [[3, 0.001], [6, 0.0008]]}],
            };
            return {
                oldModel: curve.chartData(old, "model", "trials").pointCount,
                oldWall: curve.hasWallTime(old),
                oldTasksTime: curve.chartData(old, "tasks", "time").pointCount,
                oldTasks: curve.chartData(old, "tasks", "trials").pointCount,
                freshTime: curve.chartData(fresh, "model", "time").data[0],
                freshRefs: curve.chartData(fresh, "model", "trials").references.map((r) => r.label),
                freshTaskTimes: curve.chartData(fresh, "tasks", "time").data[0],
                empty: curve.chartData({}, "model", "trials").pointCount,
            };
        }"""
    )
    assert result == {
        "oldModel": 2,  # the unknown latency is a gap, not a point
        "oldWall": False,
        "oldTasksTime": 0,
        "oldTasks": 1,
        "freshTime": [1.5, 2.5],
        "freshRefs": ["untuned default"],  # onnxruntime's is null: no line
        "freshTaskTimes": [1.5, 2.5],  # each task point at the wall time of the round that reached it
        "empty": 0,
    }
    assert watched.unexpected_errors() == []


def test_compile_download_manifest_and_profile(
    dashboard: Dashboard, open_page: Callable[..., Watched], screenshots: Path
) -> None:
    model = upload_via_api(dashboard, "compiled")
    watched = open_page()
    page = watched.page
    sign_in(watched, dashboard)
    page.goto(f"{dashboard.url}#/compilations?model={model['id']}")
    page.get_by_role("button", name="Compile", exact=True).wait_for()
    assert page.get_by_label("Model", exact=True).input_value() == model["id"]
    page.get_by_label("Use the best tuning records").uncheck()
    page.get_by_role("button", name="Add an override").click()
    page.get_by_role("textbox", name="ONNX node or kernel").fill("no_such_node")
    page.get_by_role("textbox", name="Schedule", exact=True).fill("record:999999")
    page.get_by_role("button", name="Compile", exact=True).click()
    refused = page.locator("form .error")
    refused.wait_for()
    assert "invalid_override" in refused.inner_text()  # the server's words, with its code
    page.get_by_role("button", name="Remove this onnx node or kernel").click()
    page.get_by_role("button", name="Compile", exact=True).click()

    def artifact_id() -> str | None:
        with dashboard.api() as api:
            jobs = [j for j in api.get("/v1/compilations").json() if j["model_id"] == model["id"]]
        return jobs[0]["artifact_id"] if jobs and jobs[0]["state"] == "succeeded" else None

    artifact = poll(artifact_id, 240, "the compilation to succeed")
    button = page.locator(f"button[data-artifact='{artifact}']")
    button.wait_for()
    row = page.locator(f"tr:has(button[data-artifact='{artifact}'])")
    assert "default schedules" in row.inner_text()
    with page.expect_download() as download_info:
        button.click()
    saved = Path(download_info.value.path()).read_bytes()
    with dashboard.api() as api:
        served = api.get(f"/v1/artifacts/{artifact}")
    assert saved == served.content
    assert hashlib.sha256(saved).hexdigest() == served.headers["X-Content-SHA256"]
    assert download_info.value.suggested_filename == f"{artifact}.temper"
    status = row.locator("[data-sha256]")
    status.wait_for()
    assert status.get_attribute("data-sha256") == hashlib.sha256(saved).hexdigest()
    assert "matches the server's" in status.inner_text()
    screenshot(watched, screenshots, "compilations")

    row.get_by_role("link", name=f"Manifest and profile of {artifact[:8]}").click()
    page.get_by_text("Kernels and the source of each schedule").wait_for()
    manifest = page.locator("section", has=page.get_by_role("heading", name="Manifest")).inner_text()
    assert "fused_conv2d_nchwc_add_relu_1" in manifest and "default" in manifest
    page.get_by_role("button", name="Profile the kernels").click()
    page.wait_for_selector("#page figure.bars, #page .error")
    bars = page.locator("figure.bars").first
    assert bars.is_visible(), page.locator("#page .error").inner_text()
    assert bars.locator("li").count() == len(model["tasks"])
    screenshot(watched, screenshots, "artifact-manifest-profile")
    assert_key_never_in_a_url(watched, dashboard.key)
    assert watched.unexpected_errors(allowed=("status of 422",)) == []  # the refused override


def test_records_page_and_export(
    dashboard: Dashboard, open_page: Callable[..., Watched], screenshots: Path
) -> None:
    model = upload_via_api(dashboard, "records")
    with dashboard.api() as api:
        job = api.post("/v1/tuning-jobs", json={"model_id": model["id"], "trials": 6, "batch": 3}).json()
        poll(lambda: api.get(f"/v1/tuning-jobs/{job['id']}").json()["state"] in TERMINAL, 240, "tuning")
        expected = api.get("/v1/records", params={"model_id": model["id"], "best": True}).json()
        exported = api.get("/v1/records/export").content
    watched = open_page()
    page = watched.page
    sign_in(watched, dashboard)
    page.get_by_role("navigation").get_by_role("link", name="Records").click()
    targets = page.get_by_role("region", name="Targets with tuning records")
    targets.wait_for()
    assert expected[0]["target_key"] in targets.inner_text()
    page.get_by_label("Model", exact=True).select_option(value=model["id"])
    page.get_by_role("button", name="List records").click()
    table = page.get_by_role("region", name="Tuning records", exact=True)
    table.wait_for()
    page.wait_for_function(
        "n => document.querySelectorAll('#records-list tr[data-record-id]').length === n", arg=len(expected)
    )
    for record in expected:
        assert f"record:{record['id']}" in table.inner_text()
    screenshot(watched, screenshots, "records")

    with page.expect_download() as download_info:
        page.get_by_role("button", name="Export all records").click()
    assert Path(download_info.value.path()).read_bytes().splitlines() == exported.splitlines()
    page.get_by_label("Records file (JSON lines, as exported)").set_input_files(download_info.value.path())
    page.get_by_role("button", name="Import").click()
    page.get_by_text("Imported:").wait_for()
    assert "0 record(s) added" in page.get_by_text("Imported:").inner_text()  # all there already
    assert_key_never_in_a_url(watched, dashboard.key)
    assert watched.unexpected_errors() == []


def test_narrow_screen_is_one_column(
    dashboard: Dashboard, open_page: Callable[..., Watched], screenshots: Path
) -> None:
    model = upload_via_api(dashboard, "narrow")
    watched = open_page(width=400, height=800)
    page = watched.page
    sign_in(watched, dashboard)
    page.locator("article.model").first.wait_for()
    assert page.evaluate("document.documentElement.scrollWidth") <= 400, "the page scrolls sideways"
    screenshot(watched, screenshots, "models-narrow-400")
    page.goto(f"{dashboard.url}#/models/{model['id']}")
    page.locator(".graph-listing").wait_for()
    page.locator(".kernel-button").first.click()
    page.wait_for_selector(".ir-output[data-loaded=true]")
    columns = page.evaluate("getComputedStyle(document.querySelector('.two-columns')).gridTemplateColumns")
    assert len(columns.split()) == 1, columns
    assert page.evaluate("document.documentElement.scrollWidth") <= 400, "the page scrolls sideways"
    screenshot(watched, screenshots, "model-detail-narrow-400")
    assert watched.unexpected_errors() == []
