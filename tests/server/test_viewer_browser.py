"""The viewer page (/view) in a real browser: Debian's headless Chromium driven over the DevTools protocol
(tests/browser.py) against a live ``noa serve`` with an API key.

Checked: the page asks for the key and then works, the key never in a URL; the file list shows names as
text; a file's header table and picture, whose canvas pixels equal the PNG the endpoint serves for the
request the page made; the slider changes the slice; dragging a contrast limit re-requests with range:;
the value under the cursor; a label or file name holding HTML does not run; no request leaves the server; a tilt
series' section slider and montage say each section's angle and dose from the files beside it, and which sections
noa tiltseries would leave out with the exclusions typed.
A screenshot of the page is kept beside the test's files (viewer.png).
"""

from __future__ import annotations

import base64
import io
import math
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import httpx
import mrcfile
import numpy as np
import pandas as pd
import pytest
import starfile
from browser import Browser, Page, chromium
from PIL import Image

from helpers import start_server, stop_server, write_mrc

pytestmark = pytest.mark.skipif(chromium() is None, reason="chromium not found (apt-get install chromium)")

KEY = "browser-key-5f2e71"
HOSTILE = '<img src=x onerror="window.__pwned=1"><script>window.__pwned=2</script>'
HOSTILE_NAME = "x<img src=x onerror=window.__pwned=3>.mrc"
VOLUME = np.random.default_rng(1).integers(-500, 500, size=(9, 40, 48)).astype(np.float32)
LARGE = np.random.default_rng(2).normal(size=(600, 700)).astype(np.float32)  # more than one tile at any zoom
TILT_ANGLES = [-21.0, -10.5, 0.0, 10.5, 21.0]  # folder/TS.st's, in its .rawtlt
PRE_EXPOSURE = [35.2, 17.6, 0.0, 8.8, 26.4]  # e/Å², in its RELION 5 STAR


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> Iterator[tuple[str, Path]]:
    base = tmp_path_factory.mktemp("viewer-browser")
    root = base / "root"
    (root / "folder").mkdir(parents=True)
    write_mrc(root / "volume.mrc", VOLUME, voxel_size=1.5)
    with mrcfile.new(root / "labelled.mrc", VOLUME[0], overwrite=True) as f:
        f.header.label[0] = HOSTILE[:80].encode()
        f.header.nlabl = 1
    write_mrc(root / HOSTILE_NAME, VOLUME[1])
    write_mrc(root / "folder" / "inner.mrc", VOLUME[2])
    write_mrc(root / "large.mrc", LARGE)
    write_mrc(root / "folder" / "TS.st", VOLUME[:5], stack=True)  # a tilt series, with its files beside it
    np.savetxt(root / "folder" / "TS.rawtlt", TILT_ANGLES, fmt="%g")
    starfile.write({"TS": pd.DataFrame({"rlnMicrographName": [f"{z + 1:06d}@TS.st" for z in range(5)],
                                        "rlnTomoNominalStageTiltAngle": TILT_ANGLES,
                                        "rlnMicrographPreExposure": PRE_EXPOSURE})}, root / "folder" / "TS.star")
    proc, url = start_server(root, base / "server.log", {"NOA_API_KEY": KEY})
    yield url, base
    stop_server(proc)


@pytest.fixture(scope="module")
def browser(tmp_path_factory) -> Iterator[Browser]:
    with Browser.start(tmp_path_factory.mktemp("chromium-profile")) as started:
        yield started


@pytest.fixture
def page(browser) -> Iterator[Page]:
    tab = browser.new_page()
    yield tab
    tab.close()


def open_viewer(page: Page, url: str) -> None:
    """/view, the key typed into the form it shows, and the data root listed."""
    page.goto(f"{url}/view")
    page.wait("document.body.dataset.state === 'key'")
    page.evaluate("document.getElementById('key').focus()")
    page.send("Input.insertText", text=KEY)
    page.evaluate("document.getElementById('key-form').requestSubmit()")
    page.wait("document.body.dataset.state === 'listed'")


def open_file(page: Page, name: str) -> None:
    renders = int(page.evaluate("document.body.dataset.renders"))
    page.evaluate(f"[...document.querySelectorAll('#files button')].find(b => b.textContent === {name!r}).click()")
    wait_render(page, renders)


def wait_render(page: Page, renders: int) -> None:
    page.wait(f"document.body.dataset.state === 'ready' && Number(document.body.dataset.renders) > {renders}")


def canvas_image_any(page: Page) -> tuple[np.ndarray, str]:
    """The image canvas as (H, W, 4) RGBA, and its data-view."""
    width, height, data, drawn = page.evaluate("""(() => {
        const c = document.getElementById('image');
        const d = c.getContext('2d').getImageData(0, 0, c.width, c.height);
        let s = '';
        for (let i = 0; i < d.data.length; i += 8192) s += String.fromCharCode(...d.data.subarray(i, i + 8192));
        return [c.width, c.height, btoa(s), c.dataset.view];
    })()""")
    return np.frombuffer(base64.b64decode(data), np.uint8).reshape(height, width, 4), drawn


def canvas_image(page: Page) -> tuple[np.ndarray, tuple[int, int, int]]:
    """The image canvas as (H, W, 4) RGBA, and what is drawn where (zoom, ox, oy)."""
    pixels, drawn = canvas_image_any(page)
    zoom, ox, oy = (int(v) for v in drawn.split())
    return pixels, (zoom, ox, oy)


def tile_requests(page: Page) -> list[str]:
    return [r["url"] for r in page.requests() if urlsplit(r["url"]).path == "/v1/view/tile"]


def served(url: str) -> np.ndarray:
    """The picture at ``url``, fetched here with the key and decoded by Pillow."""
    response = httpx.get(url, headers={"X-API-Key": KEY}, timeout=30)
    assert response.status_code == 200, response.text
    return np.asarray(Image.open(io.BytesIO(response.content)))


def assert_canvas_is(page: Page, tile_url: str, shape: tuple[int, int]) -> np.ndarray:
    """The canvas shows the one tile at ``tile_url``, magnified 2^zoom times, exactly its PNG's pixels."""
    pixels, (zoom, ox, oy) = canvas_image(page)
    assert zoom >= 0
    m = 2 ** zoom
    region = pixels[oy:oy + shape[0] * m, ox:ox + shape[1] * m]
    expected = served(tile_url)
    assert expected.shape == shape
    expected = expected.repeat(m, axis=0).repeat(m, axis=1)  # nearest neighbour: each pixel an m x m square
    np.testing.assert_array_equal(region[..., 0], expected)
    np.testing.assert_array_equal(region[..., 1], expected)
    assert (region[..., 3] == 255).all()
    return region[..., 0]


def test_the_key_is_asked_for_then_sent_as_a_header_never_in_a_url(server, page):
    url, _ = server
    open_viewer(page, url)
    open_file(page, "volume.mrc")
    requests = page.requests()
    api = [r for r in requests if "/v1/" in r["url"]]
    assert api[0]["url"].endswith("/v1/view/list?path=") and "X-API-Key" not in api[0]["headers"]  # answered 401
    keyed = [r for r in api if r["headers"].get("X-API-Key") == KEY]
    assert {urlsplit(r["url"]).path for r in keyed} >= {"/v1/view/list", "/v1/view/info", "/v1/view/histogram",
                                                         "/v1/view/tile"}
    assert page.evaluate("sessionStorage.getItem('noa-api-key')") == KEY
    # the download link fetches the file with the key too (the browser is told to save nothing)
    page.send("Browser.setDownloadBehavior", behavior="deny")
    page.evaluate("document.getElementById('download').click()")
    deadline = time.monotonic() + 15
    while not (downloads := [r for r in page.requests() if urlsplit(r["url"]).path == "/v1/files/volume.mrc"]):
        assert time.monotonic() < deadline, "no download request"
        time.sleep(0.05)
    assert downloads[0]["headers"].get("X-API-Key") == KEY
    requests = page.requests()
    assert all(KEY not in r["url"] for r in requests)
    # nothing but the server: no CDN, no font, no remote image
    assert all(r["url"].startswith(url + "/") or r["url"].startswith(("blob:", "data:")) for r in requests), \
        [r["url"] for r in requests]


def test_names_and_labels_are_text_and_never_run(server, page):
    url, base = server
    open_viewer(page, url)
    names = page.evaluate("[...document.querySelectorAll('#files tbody tr')].map(r => r.cells[0].textContent)")
    assert names == ["folder/", "labelled.mrc", "large.mrc", "volume.mrc", HOSTILE_NAME]
    open_file(page, HOSTILE_NAME)
    open_file(page, "labelled.mrc")
    header = page.evaluate("[...document.querySelectorAll('#header td')].map(td => td.textContent)")
    assert HOSTILE[:80] in header
    assert page.evaluate("document.querySelectorAll('#viewer img, #viewer script, #browser img').length") == 0
    assert page.evaluate("window.__pwned === undefined")
    page.send("Page.captureScreenshot")  # the page has drawn; keep a picture of it
    shot = page.send("Page.captureScreenshot", format="png")["data"]
    (base / "viewer.png").write_bytes(base64.b64decode(shot))


def test_the_picture_the_slider_the_contrast_and_the_value_under_the_cursor(server, page):
    url, _ = server
    open_viewer(page, url)
    open_file(page, "volume.mrc")
    header = dict(page.evaluate("[...document.querySelectorAll('#header tr')].map(r => [r.cells[0].textContent, "
                                "r.cells[1].textContent])"))
    assert header["shape (BDHW)"] == "1 × 9 × 40 × 48" and header["format"] == "mrc"
    first = tile_requests(page)[-1]
    assert parse_qs(urlsplit(first).query)["index"] == ["4"]  # the central slice, N // 2
    central = assert_canvas_is(page, first, (40, 48))

    # the slider: another slice, drawn as its endpoint serves it
    renders = int(page.evaluate("document.body.dataset.renders"))
    page.evaluate("(() => { const s = document.getElementById('index'); s.value = '1'; "
                  "s.dispatchEvent(new Event('input')); })()")
    wait_render(page, renders)
    second = tile_requests(page)[-1]
    assert parse_qs(urlsplit(second).query)["index"] == ["1"]
    assert not np.array_equal(assert_canvas_is(page, second, (40, 48)), central)

    # drag the low limit to the right on the histogram: the tiles come again with range:A,B
    before = parse_qs(urlsplit(second).query)["contrast"][0]
    left, top, width = page.evaluate("(() => { const c = document.getElementById('histogram'); "
                                     "const r = c.getBoundingClientRect(); "
                                     "return [r.left + c.clientLeft, r.top + c.clientTop, c.width]; })()")
    histogram = httpx.get(f"{url}/v1/view/histogram", params={"file": "volume.mrc", "axis": "z", "index": 1},
                          headers={"X-API-Key": KEY}).json()
    lo = float(before.removeprefix("range:").split(",")[0])
    # where the page draws the line: a limit beyond the histogram's range sits at its end
    x = left + min(max((lo - histogram["edges"][0]) / (histogram["edges"][-1] - histogram["edges"][0]) * width, 1),
                   width - 1)
    renders = int(page.evaluate("document.body.dataset.renders"))
    page.mouse("mousePressed", x, top + 60, clickCount=1)
    page.mouse("mouseMoved", x + 40, top + 60, buttons=1)
    page.mouse("mouseReleased", x + 40, top + 60, clickCount=1)
    wait_render(page, renders)
    third = tile_requests(page)[-1]
    after = parse_qs(urlsplit(third).query)["contrast"][0]
    assert after.startswith("range:") and float(after[6:].split(",")[0]) > lo
    assert page.evaluate("document.getElementById('rule').value") == "range"
    assert_canvas_is(page, third, (40, 48))

    # the value under the cursor: plane pixel (x 7, y 12) of slice 1
    _, (zoom, ox, oy) = canvas_image(page)
    left, top = page.evaluate("(() => { const r = document.getElementById('image').getBoundingClientRect(); "
                              "return [r.left, r.top]; })()")
    # Chromium rounds mouse positions to whole CSS pixels: aim at the first whole one inside the pixel
    m = 2 ** zoom
    page.mouse("mouseMoved", math.ceil(left + ox + 7 * m) + 0.2, math.ceil(top + oy + 12 * m) + 0.2, button="none")
    expected = f"x 7, y 12: {VOLUME[1, 12, 7]:g}"
    page.wait(f"document.getElementById('readout').textContent === {expected!r}")


def test_a_large_image_is_drawn_from_tiles_and_zoomed_by_levels(server, page):
    url, _ = server
    open_viewer(page, url)
    open_file(page, "large.mrc")
    pixels, (zoom, ox, oy) = canvas_image(page)
    assert zoom == -1  # 600 rows do not fit the 512 of the canvas: level 1, 300 x 350, drawn from 2 x 2 tiles
    tiles = {(q["x"][0], q["y"][0]): u for u in tile_requests(page)
             if (q := parse_qs(urlsplit(u).query))["level"] == ["1"]}
    assert sorted(tiles) == [("0", "0"), ("0", "1"), ("1", "0"), ("1", "1")]
    whole = np.block([[served(tiles[x, y]) for x in "01"] for y in "01"])
    assert whole.shape == (300, 350)
    np.testing.assert_array_equal(pixels[oy:oy + 300, ox:ox + 350, 0], whole)

    # zoom in about the centre: level 0, only the tiles in view
    renders = int(page.evaluate("document.body.dataset.renders"))
    page.evaluate("document.getElementById('zoom-in').click()")
    wait_render(page, renders)
    pixels, (zoom, ox, oy) = canvas_image(page)
    assert zoom == 0
    width, height = pixels.shape[1], pixels.shape[0]
    level0 = {(int(q["x"][0]), int(q["y"][0])): u for u in tile_requests(page)
              if (q := parse_qs(urlsplit(u).query))["level"] == ["0"]}
    visible = {(x, y) for x in range(3) for y in range(3)
               if ox + x * 256 < width and ox + (x + 1) * 256 > 0 and oy + y * 256 < height and oy + (y + 1) * 256 > 0}
    assert set(level0) == visible
    for (x, y), tile_url in level0.items():  # each drawn where it belongs, cut by the canvas's edges
        tile = served(tile_url)
        top, left = oy + y * 256, ox + x * 256
        shown = pixels[max(0, top):top + tile.shape[0], max(0, left):left + tile.shape[1], 0]
        np.testing.assert_array_equal(shown, tile[max(0, -top):, max(0, -left):][:shown.shape[0], :shown.shape[1]])

    # the power spectrum instead: one picture, the endpoint's, centred
    renders = int(page.evaluate("document.body.dataset.renders"))
    page.evaluate("(() => { const s = document.getElementById('spectrum'); s.checked = true; "
                  "s.dispatchEvent(new Event('change')); })()")
    wait_render(page, renders)
    spectra = [r["url"] for r in page.requests() if urlsplit(r["url"]).path == "/v1/view/image"]
    assert parse_qs(urlsplit(spectra[-1]).query)["spectrum"] == ["true"]
    expected = served(spectra[-1])
    assert max(expected.shape) <= 512
    shown = page.evaluate("document.getElementById('image').dataset.view")
    assert shown.startswith("spectrum ")
    pixels, _ = canvas_image_any(page)
    top, left = (pixels.shape[0] - expected.shape[0]) // 2, (pixels.shape[1] - expected.shape[1]) // 2
    np.testing.assert_array_equal(pixels[top:top + expected.shape[0], left:left + expected.shape[1], 0], expected)


def test_the_list_fits_the_page_and_nothing_scrolls_sideways(server, page):
    """Issue 40 item 9: at 1400 px the file list was clipped to ~480 px with its own scroll bar (the pixel-size
    column cut) and the page scrolled sideways."""
    url, _ = server
    page.send("Emulation.setDeviceMetricsOverride", width=1400, height=900, deviceScaleFactor=1, mobile=False)
    open_viewer(page, url)
    open_file(page, "volume.mrc")
    widths = page.evaluate("""(() => {
        const b = document.getElementById('browser'), e = document.documentElement;
        const last = [...document.querySelectorAll('#files tbody tr')].map(r => r.cells[r.cells.length - 1]);
        const right = Math.max(...last.map(c => c.getBoundingClientRect().right));
        return [e.scrollWidth, e.clientWidth, b.scrollWidth, b.clientWidth, right, b.getBoundingClientRect().right];
    })()""")
    page_scroll, page_width, list_scroll, list_width, last_column, list_right = widths
    assert page_scroll <= page_width, widths
    assert list_scroll <= list_width and last_column <= list_right, widths
    assert page.evaluate("[...document.querySelectorAll('#files tbody tr')].find(r => r.dataset.file === 'volume.mrc')"
                         ".cells[4].textContent") == "1.5 × 1.5 × 1.5 Å"


def test_a_scale_bar_of_a_round_length_over_the_picture(server, page):
    """Issue 40 item 9: no scale bar. Its bar spans length / pixel size x 2^zoom screen pixels."""
    url, _ = server
    open_viewer(page, url)
    open_file(page, "volume.mrc")  # 1.5 Å pixels
    length, width, label, hidden = page.evaluate(
        "(() => { const b = document.getElementById('scale-bar'); return [Number(b.dataset.length), "
        "b.firstElementChild.getBoundingClientRect().width, b.lastElementChild.textContent, b.hidden]; })()")
    _, (zoom, _, _) = canvas_image(page)
    canvas_width = page.evaluate("document.getElementById('image').width")
    assert not hidden and label == f"{length:g} Å"
    assert width == round(length / 1.5 * 2 ** zoom)
    assert canvas_width / 5 / 2 ** zoom * 1.5 / 2.5 < length <= canvas_width / 5 / 2 ** zoom * 1.5  # 1, 2 or 5 x 10^k


def test_the_view_is_in_the_url_and_a_link_opens_it_again(server, browser, page):
    """Issue 40 item 9: the URL never changed, so a view could not be linked or bookmarked."""
    url, _ = server
    open_viewer(page, url)
    open_file(page, "volume.mrc")
    renders = int(page.evaluate("document.body.dataset.renders"))
    page.evaluate("(() => { const s = document.getElementById('index'); s.value = '2'; "
                  "s.dispatchEvent(new Event('input')); const c = document.getElementById('cmap'); c.value = 'fire'; "
                  "c.dispatchEvent(new Event('change')); })()")
    wait_render(page, renders)
    page.wait("location.hash.includes('index=2') && location.hash.includes('cmap=fire')")
    link = page.evaluate("location.href")
    other = browser.new_page()
    try:
        other.goto(link)  # a new tab asks for the key again, then opens the linked view
        other.wait("document.body.dataset.state === 'key'")
        other.evaluate("document.getElementById('key').focus()")
        other.send("Input.insertText", text=KEY)
        other.evaluate("document.getElementById('key-form').requestSubmit()")
        other.wait("document.body.dataset.state === 'ready' && document.getElementById('file-name').textContent "
                   "=== 'volume.mrc'")
        query = parse_qs(urlsplit(tile_requests(other)[-1]).query)
        assert (query["index"], query["cmap"]) == (["2"], ["fire"])
        assert other.evaluate("document.getElementById('index').value") == "2"
        # a link pasted into an open tab (only the fragment changes) opens its view too
        other.evaluate("location.hash = location.hash.replace('index=2', 'index=6')")
        other.wait("document.getElementById('index').value === '6' && document.body.dataset.state === 'ready'")
        assert parse_qs(urlsplit(tile_requests(other)[-1]).query)["index"] == ["6"]
    finally:
        other.close()


def tilt_label(section: int) -> str:
    """What the page says of a section of folder/TS.st, from the values its files were written with."""
    angle, dose = TILT_ANGLES[section], PRE_EXPOSURE[section]
    return f"{'−' if angle < 0 else ''}{abs(angle):.1f}° · {dose:.1f} e/Å²"


def open_tilt_series(page: Page, url: str) -> None:
    """The viewer at ``url`` with folder/TS.st open."""
    open_viewer(page, url)
    page.evaluate("[...document.querySelectorAll('#files button')].find(b => b.textContent === 'folder/').click()")
    page.wait("[...document.querySelectorAll('#files tr')].some(r => r.dataset.file === 'folder/TS.st')")
    open_file(page, "TS.st")


def test_a_tilt_series_slider_and_montage_say_each_sections_angle_and_dose(server, page):
    """Issue 45 item 5: a tilt series' section slider said only its number."""
    open_tilt_series(page, server[0])
    expected = f"0 / 4 · {tilt_label(0)}"
    page.wait(f"document.getElementById('section-out').textContent === {expected!r}")
    assert expected == "0 / 4 · −21.0° · 35.2 e/Å²"
    renders = int(page.evaluate("document.body.dataset.renders"))
    page.evaluate("(() => { const s = document.getElementById('section'); s.value = '3'; "
                  "s.dispatchEvent(new Event('input')); })()")
    wait_render(page, renders)
    assert page.evaluate("document.getElementById('section-out').textContent") == f"3 / 4 · {tilt_label(3)}"
    # the montage: the panel under the cursor says its section's tilt
    renders = int(page.evaluate("document.body.dataset.renders"))
    page.evaluate("(() => { const m = document.getElementById('montage'); m.checked = true; "
                  "m.dispatchEvent(new Event('change')); })()")
    wait_render(page, renders)
    _, drawn = canvas_image_any(page)
    scale, ox, oy = (float(v) for v in drawn.split()[1:])
    left, top = page.evaluate("(() => { const r = document.getElementById('image').getBoundingClientRect(); "
                              "return [r.left, r.top]; })()")
    page.mouse("mouseMoved", left + ox + 2 * scale, top + oy + 2 * scale, button="none")  # in panel 0
    expected = f"section 0 · {tilt_label(0)}"
    page.wait(f"document.getElementById('readout').textContent === {expected!r}")


def header_cell(page: Page, name: str) -> str | None:
    """The text of the header row ``name`` (None: no such row)."""
    return page.evaluate(f"(() => {{ const r = [...document.querySelectorAll('#header tr')].find(r => "
                         f"r.cells[0].textContent === {name!r}); return r ? r.cells[1].textContent : null; }})()")


def type_into(page: Page, element: str, text: str) -> None:
    """``text`` typed into the input ``element`` (its old text replaced), then committed as leaving it does."""
    page.evaluate(f"(() => {{ const e = document.getElementById({element!r}); e.value = ''; e.focus(); }})()")
    page.send("Input.insertText", text=text)
    page.evaluate(f"document.getElementById({element!r}).dispatchEvent(new Event('change'))")


def test_a_tilt_series_exclusions_typed_mark_the_sections_noa_tiltseries_would_leave_out(server, page):
    """Issue 45 item 5: the tilts noa tiltseries would leave out, typed as its options, are said on the slider."""
    open_tilt_series(page, server[0])
    page.wait("!document.getElementById('exclude-box').hidden")
    type_into(page, "exclude-angle", "15")
    page.wait("document.getElementById('section-out').textContent.includes('left out')")
    assert page.evaluate("document.getElementById('section-out').textContent") == \
        f"0 / 4 · {tilt_label(0)} · left out: -21° is beyond 15°"
    assert header_cell(page, "left out") == "2 of 5 tilts (sections 0, 4)"
    assert header_cell(page, "noa tiltseries") == "--max-angle 15"
    asked = [parse_qs(urlsplit(r["url"]).query) for r in page.requests() if "/v1/view/tilts" in r["url"]]
    assert asked[-1]["max_angle"] == ["15"]
    renders = int(page.evaluate("document.body.dataset.renders"))
    page.evaluate("(() => { const s = document.getElementById('section'); s.value = '4'; "
                  "s.dispatchEvent(new Event('input')); })()")
    wait_render(page, renders)
    assert page.evaluate("document.getElementById('section-out').textContent") == \
        f"4 / 4 · {tilt_label(4)} · left out: 21° is beyond 15°"
    # a view the series does not have: the server's words beside the inputs, the marks as they were
    type_into(page, "exclude-views", "2,9")
    page.wait("document.getElementById('exclude-problem').textContent !== ''")
    assert page.evaluate("document.getElementById('exclude-problem').textContent").startswith(
        "exclude: section 9 (in '9') is outside 1..5")
    type_into(page, "exclude-views", "2")
    page.wait("document.getElementById('exclude-problem').textContent === '' && [...document.querySelectorAll("
              "'#header tr')].some(r => r.cells[1].textContent === '--exclude 2 --max-angle 15')")
    assert header_cell(page, "left out") == "3 of 5 tilts (sections 0, 1, 4)"
    # the exclusions are in the URL: a link opens the series with them typed and their marks
    fragment = parse_qs(page.evaluate("location.hash.slice(1)"))
    assert (fragment["exclude"], fragment["max_angle"]) == (["2"], ["15"]) and "exclude_dark" not in fragment
    page.evaluate("location.hash = location.hash.replace('max_angle=15', 'max_angle=10')")
    page.wait("document.getElementById('exclude-angle').value === '10' && [...document.querySelectorAll('#header tr')]"
              ".some(r => r.cells[1].textContent === '--exclude 2 --max-angle 10')")
    assert page.evaluate("document.getElementById('exclude-views').value") == "2"
    assert header_cell(page, "left out") == "4 of 5 tilts (sections 0, 1, 3, 4)"


def sparse_volume(path: Path, shape: tuple[int, int, int], pattern: np.ndarray) -> None:
    """A float32 MRC volume of ``shape`` (4 GiB here) holding zeros, written sparse (nothing stored for them), with
    ``pattern`` at the centre of its central slice."""
    depth, rows, cols = shape
    with mrcfile.new(path, overwrite=True) as f:
        f.set_data(np.zeros((2, 2, 2), np.float32))
        f.header.nx, f.header.ny, f.header.nz = cols, rows, depth
        f.header.mx, f.header.my, f.header.mz = cols, rows, depth
        f.header.cella = (cols * 1.0, rows * 1.0, depth * 1.0)
        header = f.header.tobytes()
    with open(path, "r+b") as f:
        f.write(header)
        f.truncate(1024 + depth * rows * cols * 4)
        top, left = (rows - pattern.shape[0]) // 2, (cols - pattern.shape[1]) // 2
        for i, row in enumerate(pattern.astype(np.float32)):
            f.seek(1024 + ((depth // 2 * rows) + top + i) * cols * 4 + left * 4)
            f.write(row.tobytes())


def peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmHWM")


@pytest.mark.slow  # 10-35 s: scripts/test runs it after the rest
def test_a_4_gib_volume_is_zoomed_through_three_levels_in_bounded_memory(tmp_path, page):
    """Issue 46 item 2: a 4 GiB volume (16384² slices) opened at the level that fits the canvas, then zoomed in three
    times: coarse levels are drawn from the overview, finer ones read only their tiles' regions; each canvas shows the
    tiles served, and the service's peak resident memory does not grow while zooming."""
    root = tmp_path / "root"
    root.mkdir()
    yy, xx = np.mgrid[0:2048, 0:2048]
    pattern = np.where((yy // 128 + xx // 128) % 2 == 0, 100.0, -100.0) + yy / 64.0
    sparse_volume(root / "big.mrc", (4, 16384, 16384), pattern)
    proc, url = start_server(root, tmp_path / "server.log", {"NOA_API_KEY": KEY})
    try:
        open_viewer(page, url)
        open_file(page, "big.mrc")
        opened = peak_rss_mib(proc.pid)
        levels = []
        for _ in range(3):
            renders = int(page.evaluate("document.body.dataset.renders"))
            page.evaluate("document.getElementById('zoom-in').click()")
            wait_render(page, renders)
            pixels, (zoom, ox, oy) = canvas_image(page)
            level = -zoom
            levels.append(level)
            drawn = [(int(q["x"][0]), int(q["y"][0]), u) for u in tile_requests(page)
                     if (q := parse_qs(urlsplit(u).query))["level"] == [str(level)]]
            assert drawn
            for x, y, tile_url in drawn:  # each tile drawn where it belongs, cut by the canvas's edges
                tile = served(tile_url)
                top, left = oy + y * 256, ox + x * 256
                if top >= pixels.shape[0] or left >= pixels.shape[1] or top + 256 <= 0 or left + 256 <= 0:
                    continue
                shown = pixels[max(0, top):top + tile.shape[0], max(0, left):left + tile.shape[1], 0]
                np.testing.assert_array_equal(
                    shown, tile[max(0, -top):, max(0, -left):][:shown.shape[0], :shown.shape[1]])
        assert levels == [levels[0], levels[0] - 1, levels[0] - 2] and levels[-1] >= 2
        assert peak_rss_mib(proc.pid) - opened < 64, (opened, peak_rss_mib(proc.pid))
    finally:
        stop_server(proc)
