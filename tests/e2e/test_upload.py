"""A learner's own run in the browser: upload a recorded file on step 3 and read its two loss scales."""

from __future__ import annotations

import pytest

from lensa.runstats import load, measured
from tests.e2e.harness import wait_for_app
from tests.runfixtures import upload_bytes

pytestmark = pytest.mark.e2e

METRIC = '[data-testid="stMetricValue"]'


def test_upload_on_step3_names_the_file_and_its_two_loss_scales(server, page, tmp_path):
    path = tmp_path / "my-run.npz"
    path.write_bytes(upload_bytes())
    run = load(path)
    stats = measured.tensor_stats(run, "weight_grad", measured.ALL_LAYERS, run.steps("weight_grad")[-1])
    bounds = measured.scale_bounds(stats)
    keep, safe = f"2^{bounds.keep_k}", f"2^{bounds.safe_k}"

    page.goto(f"{server.url}/loss_scaling?lang=en&data=upload")
    wait_for_app(page)
    assert "Choose a .npz file" in page.locator('[data-testid="stAlert"]').first.inner_text()
    page.locator('[data-testid="stFileUploader"] input[type="file"]').set_input_files(str(path))
    page.get_by_text("Data: your file “my-run.npz”", exact=False).first.wait_for()
    wait_for_app(page)
    assert page.locator('[data-testid="stException"]').count() == 0
    body = page.locator('[data-testid="stMain"]').inner_text()
    assert f"S = {keep}" in body and f"S = {safe}" in body
    assert keep in page.locator(METRIC).all_inner_texts() and safe in page.locator(METRIC).all_inner_texts()
    # the choice is in the URL, and the next step opens with the same file: it stays for the session
    assert "data=upload" in page.url
    page.get_by_role("link", name="4 · FP32 master weights →").click()
    page.wait_for_url("**/master_weights?**data=upload**")
    page.get_by_text("Data: your file “my-run.npz”", exact=False).first.wait_for()
    wait_for_app(page)
    assert page.locator('[data-testid="stException"]').count() == 0


def test_a_busy_server_tells_the_learner_to_try_again_in_the_pages_language(page, tmp_path):
    """Upload budget below one file: the uploader shows "busy, try again in a minute" in Indonesian, and the
    page goes on working."""
    from lensa.ui import i18n, limits
    from tests.e2e.harness import Server

    path = tmp_path / "my-run.npz"
    path.write_bytes(upload_bytes())
    with Server(extra_env={limits.UPLOAD_BUDGET_ENV: "1"}) as busy:
        page.goto(f"{busy.url}/loss_scaling?lang=id&data=upload")
        wait_for_app(page)
        page.locator('[data-testid="stFileUploader"] input[type="file"]').set_input_files(str(path))
        page.get_by_text(i18n.text("id", "limits.upload_busy"), exact=False).first.wait_for()
        assert page.locator('[data-testid="stException"]').count() == 0
        assert i18n.text("id", "data.no_upload").split("`")[0] in page.locator('[data-testid="stMain"]').inner_text()


def test_past_the_budget_for_kept_runs_an_uploaded_file_is_not_kept_and_the_page_says_so(chromium, tmp_path):
    """Kept-runs budget 1 MB, each session's file unpacks to about 0.3 MB: the fourth session's is refused."""
    from lensa.ui import i18n, limits
    from tests.e2e.harness import Server

    path = tmp_path / "my-run.npz"
    path.write_bytes(upload_bytes())
    assert 3 * limits.recordings_bytes([load(path)]) < 2**20 < 4 * limits.recordings_bytes([load(path)])
    with Server(extra_env={limits.RECORDINGS_BUDGET_ENV: "1"}) as server:
        context = chromium.new_context(viewport={"width": 1280, "height": 900})
        try:
            pages = []
            for n in range(4):
                pg = context.new_page()
                pg.set_default_timeout(30_000)
                pg.goto(f"{server.url}/loss_scaling?lang={('en', 'id')[n // 3]}&data=upload")
                wait_for_app(pg)
                pg.locator('[data-testid="stFileUploader"] input[type="file"]').set_input_files(str(path))
                wait_for_app(pg)
                pages.append(pg)
            for pg in pages[:3]:
                pg.get_by_text("Data: your file “my-run.npz”", exact=False).first.wait_for()
            last = pages[3]
            last.get_by_text(i18n.text("id", "limits.upload_runs_busy"), exact=False).first.wait_for()
            assert last.locator('[data-testid="stException"]').count() == 0
        finally:
            context.close()
