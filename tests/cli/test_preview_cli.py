"""noa preview through its doors: the CLI (pictures decoded by Pillow against NumPy), --terminal (escape codes
parsed back; a real terminal in tmux, read with capture-pane), batches into a gallery, HTTP uploads, paths and
jobs; refusals with one line (exit 2) or a problem, nothing left behind."""

from __future__ import annotations

import io as bytes_io
import re
import shutil
import subprocess
import time
import tracemalloc

import numpy as np
import pytest
from PIL import Image

from helpers import EXAMPLE_MAP, assert_problem, assert_user_error, noa, random_values, wait_job, write_mrc
from noa_core import operations
from noa_core.compute.moments import RunningStatistics
from noa_core.operations import preview as declaration
from noa_core.pictures import drawing
from noa_core.run import local

GAP = drawing.GAP


def sigma_levels(values: np.ndarray, k: float = 3.0) -> np.ndarray:
    """RELION's --sigma_contrast levels of ``values`` (mean +- k sd with n - 1, floor((v - lo) / (range / 255)))."""
    v = values.astype(np.float64)
    lo, hi = v.mean() - k * v.std(ddof=1), v.mean() + k * v.std(ddof=1)
    return np.floor((np.clip(v, lo, hi) - lo) / ((hi - lo) / 255)).astype(np.uint8)


def decoded(path_or_bytes) -> Image.Image:
    source = bytes_io.BytesIO(path_or_bytes) if isinstance(path_or_bytes, bytes) else path_or_bytes
    image = Image.open(source)
    image.load()
    return image


def leftovers(folder) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("."))


def test_the_declaration_names_the_librarys_colour_maps():
    assert declaration.CMAPS == drawing.CMAPS
    assert isinstance(operations.get("preview"), operations.Writes)


def test_a_micrograph_to_png_is_relions_sigma_contrast_binned(tmp_path):
    image = random_values((48, 64), seed=1)
    write_mrc(tmp_path / "mic.mrc", image)
    result = noa("preview", tmp_path / "mic.mrc", tmp_path / "mic.png", "--size", "32")
    assert result.returncode == 0, result.stderr
    picture = decoded(tmp_path / "mic.png")
    assert picture.format == "PNG" and picture.mode == "L" and picture.size == (32, 24)
    binned = image.reshape(24, 2, 32, 2).mean(axis=(1, 3))
    np.testing.assert_array_equal(np.asarray(picture), sigma_levels(binned))
    assert leftovers(tmp_path) == []


def test_jpeg_invert_and_colour(tmp_path):
    image = np.add.outer(np.arange(32), np.arange(40)).astype(np.float32)  # smooth: JPEG keeps it close
    write_mrc(tmp_path / "ramp.mrc", image)
    assert noa("preview", tmp_path / "ramp.mrc", tmp_path / "ramp.jpg", "--contrast", "minmax", "--invert",
               "--quality", "95", "--bin", "1").returncode == 0
    picture = decoded(tmp_path / "ramp.jpg")
    assert picture.format == "JPEG" and picture.size == (40, 32)
    want = 255 - np.floor((image - image.min()) / ((image.max() - image.min()) / 255))
    assert np.abs(np.asarray(picture).astype(int) - want).max() <= 4
    assert noa("preview", tmp_path / "ramp.mrc", tmp_path / "fire.png", "--cmap", "fire", "--contrast",
               "range:0,70", "--bin", "1").returncode == 0
    rgb = np.asarray(decoded(tmp_path / "fire.png"))
    x = np.floor(np.clip(image, 0, 70) / (70 / 255)) / 255
    fire = np.rint(np.stack([np.clip(3 * x, 0, 1), np.clip(3 * x - 1, 0, 1), np.clip(3 * x - 2, 0, 1)], -1) * 255)
    np.testing.assert_array_equal(rgb, fire)


def test_flip_y_and_the_marked_corner(tmp_path):
    image = np.zeros((20, 30), np.float32)
    image[0, :3] = 1.0  # MRC's first row, its first three pixels
    write_mrc(tmp_path / "corner.mrc", image)
    for flags, row in (((), 0), (("--flip-y",), 19)):
        out = tmp_path / f"c{row}.png"
        result = noa("preview", tmp_path / "corner.mrc", out, "--contrast", "minmax", "--bin", "1", *flags)
        assert result.returncode == 0
        pixels = np.asarray(decoded(out))
        assert (pixels[row, :3] == 255).all() and pixels.sum() == 3 * 255, flags


def test_volumes_slices_projection_and_montage(tmp_path):
    volume = random_values((10, 16, 24), seed=2)
    write_mrc(tmp_path / "vol.mrc", volume, voxel_size=2.0)
    assert noa("preview", tmp_path / "vol.mrc", tmp_path / "three.png", "--bin", "1").returncode == 0
    three = np.asarray(decoded(tmp_path / "three.png"))
    assert three.shape == (16, 24 + GAP + 24 + GAP + 16)
    drawn = np.concatenate([volume[5].ravel(), volume[:, 8].ravel(), volume[:, :, 12].ravel()])
    lo = drawn.astype(np.float64).mean() - 3 * drawn.astype(np.float64).std(ddof=1)
    hi = drawn.astype(np.float64).mean() + 3 * drawn.astype(np.float64).std(ddof=1)
    np.testing.assert_array_equal(three[:10, 2 * 24 + 2 * GAP:],
                                  np.floor((np.clip(volume[:, :, 12], lo, hi) - lo) / ((hi - lo) / 255)))

    assert noa("preview", tmp_path / "vol.mrc", tmp_path / "y3.png", "--slice", "y", "--index", "3",
               "--bin", "1").returncode == 0
    np.testing.assert_array_equal(np.asarray(decoded(tmp_path / "y3.png")), sigma_levels(volume[:, 3]))
    assert noa("preview", tmp_path / "vol.mrc", tmp_path / "px.png", "--projection", "x", "--bin", "1").returncode == 0
    np.testing.assert_array_equal(np.asarray(decoded(tmp_path / "px.png")),
                                  sigma_levels(volume.astype(np.float64).mean(2).astype(np.float32)))

    assert noa("preview", tmp_path / "vol.mrc", tmp_path / "m.png", "--montage", "--every", "3", "--columns", "2",
               "--contrast", "minmax", "--bin", "1").returncode == 0
    montage = np.asarray(decoded(tmp_path / "m.png"))
    assert montage.shape == (2 * 16 + GAP, 2 * 24 + GAP)  # z = 0, 3, 6, 9 in 2 x 2
    lo, hi = float(volume[::3].min()), float(volume[::3].max())
    for n, z in enumerate((0, 3, 6, 9)):
        r, c = divmod(n, 2)
        cell = montage[r * (16 + GAP):r * (16 + GAP) + 16, c * (24 + GAP):c * (24 + GAP) + 24]
        np.testing.assert_array_equal(cell, np.floor((volume[z].astype(np.float64) - lo) / ((hi - lo) / 255)))


def test_spectrum_against_numpy_fft(tmp_path):
    image = random_values((32, 32), seed=3)
    write_mrc(tmp_path / "mic.mrc", image)
    result = noa("preview", tmp_path / "mic.mrc", tmp_path / "ps.png", "--spectrum", "--contrast", "minmax",
                 "--bin", "1")
    assert result.returncode == 0, result.stderr
    spectrum = np.log(np.fft.fftshift(np.abs(np.fft.fft2(image.astype(np.float64))) ** 2) / image.size)
    want = np.floor((spectrum - spectrum.min()) / ((spectrum.max() - spectrum.min()) / 255)).clip(0, 255)
    assert np.abs(np.asarray(decoded(tmp_path / "ps.png")).astype(int) - want).max() <= 1


def test_scale_bar_drawn_or_refused(tmp_path):
    write_mrc(tmp_path / "flat.mrc", np.zeros((64, 96), np.float32), voxel_size=5.0)
    assert noa("preview", tmp_path / "flat.mrc", tmp_path / "bar.png", "--scale-bar", "--contrast",
               "range:0,1", "--bin", "1").returncode == 0
    pixels = np.asarray(decoded(tmp_path / "bar.png"))
    _, length, label = drawing.scale_bar_length(96, 5.0)
    assert label == "10 nm" and length == 20  # 96 x 5 / 4 = 120 Å -> 100 Å = 20 pixels of 5 Å
    y0, y1, x0, x1 = drawing.scale_bar_box(0, 0, 64, 96, length)
    assert (pixels[y0:y1, x0:x1] == 255).all() and pixels[y0:y1, x1:].max() == 0
    write_mrc(tmp_path / "unknown.mrc", np.zeros((16, 16), np.float32))
    assert_user_error(noa("preview", tmp_path / "unknown.mrc", tmp_path / "no.png", "--scale-bar"),
                      "--scale-bar", "pixel size is unknown", "--angpix")
    assert not (tmp_path / "no.png").exists() and leftovers(tmp_path) == []
    assert noa("preview", tmp_path / "unknown.mrc", tmp_path / "yes.png", "--scale-bar", "--angpix",
               "2").returncode == 0


def test_a_small_map_is_magnified_with_readable_text(tmp_path, make_client):
    """Issue 40 item 8: noa preview map100.mrc p.png --scale-bar gave 308 x 100 pixels, a 5 x 7 pixel label and no
    panel labels. Now 3 x 3 pixels a voxel (the most within --size 1024), the text 18 pixels high, --labels."""
    volume = random_values((100, 100, 100), seed=8)
    write_mrc(tmp_path / "map100.mrc", volume, voxel_size=1.0)
    assert noa("preview", tmp_path / "map100.mrc", tmp_path / "p.png", "--scale-bar", "--labels").returncode == 0
    assert noa("preview", tmp_path / "map100.mrc", tmp_path / "plain.png", "--bin", "1").returncode == 0
    picture, plain = np.asarray(decoded(tmp_path / "p.png")), np.asarray(decoded(tmp_path / "plain.png"))
    assert plain.shape == (100, 3 * 100 + 2 * GAP) and picture.shape == (300, 3 * 300 + 2 * GAP)
    text = np.zeros(picture.shape, bool)
    for n in range(3):  # each panel's label at its top left; the bar and its label at the first one's bottom left
        text[:40, n * (300 + GAP):n * (300 + GAP) + 60] = True
    text[240:, :100] = True
    for n in range(3):
        panel = picture[:, n * (300 + GAP):n * (300 + GAP) + 300]
        want = np.kron(plain[:, n * (100 + GAP):n * (100 + GAP) + 100], np.ones((3, 3), np.uint8))
        inside = text[:, n * (300 + GAP):n * (300 + GAP) + 300]
        np.testing.assert_array_equal(panel[~inside], want[~inside])
        assert (panel[inside] != want[inside]).sum() > 50  # the label, and on the first panel the bar
    rows = np.flatnonzero((picture[:40, :60] == 255).any(axis=1))
    assert np.ptp(rows) + 1 >= 12, rows  # "XY" as tall as its font: readable
    upload = make_client().post("/v1/upload/preview", data={"labels": "true", "size": "512"},
                                files={"file": ("map100.mrc", (tmp_path / "map100.mrc").read_bytes())})
    assert upload.status_code == 200, upload.text
    shown = np.asarray(decoded(upload.content))
    assert shown.shape == (100, 3 * 100 + 2 * GAP)  # 304 > 512 / 2: not magnified within --size 512
    assert (shown[:20, :40] != plain[:20, :40]).any() and (shown[20:] == plain[20:]).all()


@pytest.mark.parametrize("args, fragments", [
    (("out.tif",), ("out.tif", ".png, .jpg")),
    (("out.jpg", "--format", "png"), ("--format", "names a JPEG file")),
    (("out.png", "--contrast", "sigma:-1"), ("--contrast", "K must be above 0")),
    (("out.png", "--contrast", "gamma"), ("--contrast", "sigma:K")),
    (("out.png", "--section", "4"), ("--section", "0..0")),
    (("out.png", "--slice", "y"), ("--slice", "an image has no y slice")),
    (("out.png", "--size", "8"), ("--size", "must be between 16 and")),
])
def test_bad_input_is_one_line_and_no_file(tmp_path, args, fragments):
    write_mrc(tmp_path / "mic.mrc", np.zeros((16, 16), np.float32))
    assert_user_error(noa("preview", tmp_path / "mic.mrc", *[tmp_path / a if a.startswith("out.") else a
                                                             for a in args]), *fragments)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mic.mrc"]


def test_a_gallery_with_out_dir(tmp_path):
    for n in range(3):
        write_mrc(tmp_path / f"m{n}.mrc", random_values((24, 24), seed=n))
    (tmp_path / "gallery").mkdir()
    result = noa("preview", *[tmp_path / f"m{n}.mrc" for n in range(3)], "--out-dir", tmp_path / "gallery",
                 "--format", "jpeg", "--size", "16")
    assert result.returncode == 0, result.stderr
    assert sorted(p.name for p in (tmp_path / "gallery").iterdir()) == ["m0.jpg", "m1.jpg", "m2.jpg"]
    assert decoded(tmp_path / "gallery" / "m1.jpg").size == (12, 12)  # 24 px in at most 16: k = 2


ESCAPES = re.compile(r"\x1b\[38;2;(\d+);(\d+);(\d+)m\x1b\[(?:48;2;(\d+);(\d+);(\d+)|49)m\u2580")


def parse_half_blocks(text: str) -> np.ndarray:
    """The RGB pixels drawn by half blocks: two rows a line (the glyph's colour above, the background below)."""
    rows = []
    for line in text.splitlines():
        cells = ESCAPES.findall(line)
        rows.append([tuple(map(int, c[:3])) for c in cells])
        if all(c[3] for c in cells):
            rows.append([tuple(map(int, c[3:])) for c in cells])
    return np.array(rows, dtype=np.uint8)


def test_terminal_output_parsed_back(tmp_path):
    image = random_values((30, 40), seed=4)
    write_mrc(tmp_path / "mic.mrc", image)
    # 200 columns (the tests' COLUMNS), 10 lines: 16 rows of pixels at most (a line kept for the prompt), k = 2
    result = noa("preview", tmp_path / "mic.mrc", "--terminal", "--cmap", "viridis", env={"LINES": "10"})
    assert result.returncode == 0, result.stderr
    assert len(result.stdout.splitlines()) == 8  # 15 rows: the last line's lower half is the terminal's own
    drawn = parse_half_blocks(result.stdout)
    binned = image.reshape(15, 2, 20, 2).mean(axis=(1, 3))
    assert drawn.shape == (15, 20, 3)
    np.testing.assert_array_equal(drawn, drawing.colour_table("viridis")[sigma_levels(binned)])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mic.mrc"]  # nothing written


def test_non_finite_values_are_left_out_of_the_contrast_with_one_notice(tmp_path):
    image = random_values((24, 32), seed=9)
    image[5, 7], image[10, 3] = np.nan, np.inf
    write_mrc(tmp_path / "nan.mrc", image)
    result = noa("preview", tmp_path / "nan.mrc", tmp_path / "nan.png", "--bin", "1")
    assert result.returncode == 0, result.stderr
    assert "Warning" not in result.stderr, result.stderr
    notes = [line for line in result.stderr.splitlines() if "note" in line]
    assert len(notes) == 1, result.stderr
    assert f"{tmp_path / 'nan.mrc'}: 2 of the 768 values drawn are NaN or infinite" in notes[0]
    finite = image[np.isfinite(image)].astype(np.float64)
    lo, hi = finite.mean() - 3 * finite.std(ddof=1), finite.mean() + 3 * finite.std(ddof=1)
    expected = np.floor((np.clip(image.astype(np.float64), lo, hi) - lo) / ((hi - lo) / 255))
    expected[5, 7] = 0  # NaN: black; +inf clips to white
    np.testing.assert_array_equal(np.asarray(decoded(tmp_path / "nan.png")), expected.astype(np.uint8))
    # --terminal says the same (issue 40 item 11: it said nothing), after the picture
    shown = noa("preview", tmp_path / "nan.mrc", "--terminal", env={"LINES": "40"})
    assert shown.returncode == 0 and shown.stderr.splitlines() == notes, shown.stderr
    assert noa("preview", tmp_path / "nan.mrc", "--terminal", "--quiet", env={"LINES": "40"}).stderr == ""
    gray = expected.astype(np.uint8)
    np.testing.assert_array_equal(parse_half_blocks(shown.stdout), np.repeat(gray[..., None], 3, axis=2))


def test_the_terminal_text_is_counted_in_the_memory_check(tmp_path, monkeypatch):
    """--terminal --bin 1 of a 1536 x 1536 image (a text of 90 million characters): what the memory check is
    told bounds what drawing the picture and giving its text hold (tracemalloc counts NumPy's and Python's)."""
    from noa_core import limits

    write_mrc(tmp_path / "big.mrc", random_values((1536, 1536), seed=10))
    told = []
    check = limits.check_working_memory
    monkeypatch.setattr(limits, "check_working_memory", lambda nbytes, what: told.append(nbytes) or check(nbytes, what))
    monkeypatch.setattr(limits, "available_cores", lambda: 2)  # the bands' share as on a small machine
    preview = operations.get("preview")
    options = preview.options(bin=1)
    tracemalloc.start()
    try:
        text, notices = preview.show(tmp_path / "big.mrc", options, 80, 24)
        lines = sum(piece.count("\n") for piece in text)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert lines == 768 and len(told) == 1 and notices == []
    assert peak <= told[0], f"{peak >> 20} MiB held, {told[0] >> 20} MiB counted"


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
def test_terminal_preview_in_tmux(tmp_path):
    write_mrc(tmp_path / "mic.mrc", np.add.outer(np.arange(20), np.arange(30)).astype(np.float32))
    session = f"noa-preview-{time.monotonic_ns()}"
    command = f"{noa_path()} preview {tmp_path / 'mic.mrc'} --terminal --contrast minmax; sleep 30"
    subprocess.run(["tmux", "-f", "/dev/null", "new-session", "-d", "-s", session, "-x", "40", "-y", "20",
                    "env", "TERM=xterm-256color", "COLORTERM=truecolor", "sh", "-c", command], check=True)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            screen = subprocess.run(["tmux", "capture-pane", "-e", "-p", "-t", session], capture_output=True,
                                    text=True).stdout
            if screen.count("\u2580") >= 30 * 10:
                break
            time.sleep(0.2)
        lines = [line for line in screen.splitlines() if "\u2580" in line]
        assert len(lines) == 10 and all(line.count("\u2580") == 30 for line in lines), screen
        # tmux re-emits the colours of each cell it shows: the first cell is black over black, the last white
        first = re.search(r"38;2;(\d+);(\d+);(\d+)", lines[0])
        last = re.findall(r"38;2;(\d+);(\d+);(\d+)", lines[-1])
        assert first is not None and first.groups() == ("0", "0", "0") and last and last[-1] != ("0", "0", "0")
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True)


def noa_path() -> str:
    from helpers import NOA

    return NOA[0]


# -- Python -------------------------------------------------------------------------------------------


def test_python_api_and_repr_png(tmp_path):
    import noa_core as noa

    volume = random_values((8, 12, 16), seed=5)
    array = noa.asarray(volume)
    picture = noa.preview(array, axis="z", index=2, contrast="minmax")
    lo, hi = float(volume[2].min()), float(volume[2].max())
    np.testing.assert_array_equal(picture, np.floor((volume[2].astype(np.float64) - lo) / ((hi - lo) / 255)))
    shown = decoded(array._repr_png_())
    assert shown.size == (16 + GAP + 16 + GAP + 12, 12)  # the three central slices
    big = noa.zeros((1, 1, 2048, 1024))
    assert decoded(big._repr_png_()).size == (256, 512)  # bounded: longest side 512
    assert noa.zeros((0, 4))._repr_png_() is None
    task = operations.get("preview").task(contrast="minmax", slice="z", index=2, bin=1)
    write_mrc(tmp_path / "v.mrc", volume)
    local.write(task, tmp_path / "v.mrc", tmp_path / "v.png")
    np.testing.assert_array_equal(np.asarray(decoded(tmp_path / "v.png")), picture)


def test_a_pictures_pixels_are_not_measured(tmp_path, monkeypatch):
    """A picture has no header statistics: its pixels are written without the pass that an image's take (a third
    of a thumbnail's time, measured), and drawn as before."""
    volume = random_values((8, 12, 16), seed=5)
    write_mrc(tmp_path / "v.mrc", volume)

    def measured(block):
        raise AssertionError("the picture's pixels were measured")

    monkeypatch.setattr(RunningStatistics, "of", measured)
    local.write(operations.get("preview").task(contrast="minmax", slice="z", index=2, bin=1), tmp_path / "v.mrc",
                tmp_path / "v.png")
    lo, hi = float(volume[2].min()), float(volume[2].max())
    np.testing.assert_array_equal(np.asarray(decoded(tmp_path / "v.png")),
                                  np.floor((volume[2].astype(np.float64) - lo) / ((hi - lo) / 255)))


# -- HTTP -------------------------------------------------------------------------------------------


def test_upload_returns_the_picture(tmp_path, make_client):
    image = random_values((32, 48), seed=6)
    write_mrc(tmp_path / "mic.mrc", image)
    client = make_client()
    response = client.post("/v1/upload/preview", data={"size": "24"},
                           files={"file": ("mic.mrc", (tmp_path / "mic.mrc").read_bytes())})
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "image/png"
    assert response.headers["content-disposition"] == 'attachment; filename="mic_preview.png"'
    np.testing.assert_array_equal(np.asarray(decoded(response.content)),
                                  sigma_levels(image.reshape(16, 2, 24, 2).mean(axis=(1, 3))))
    jpeg = client.post("/v1/upload/preview", data={"format": "jpeg"},
                       files={"file": ("mic.mrc", (tmp_path / "mic.mrc").read_bytes())})
    assert jpeg.status_code == 200 and jpeg.headers["content-type"] == "image/jpeg"
    assert decoded(jpeg.content).format == "JPEG"
    refused = client.post("/v1/upload/preview", data={"contrast": "percentiles:90,10"},
                          files={"file": ("mic.mrc", (tmp_path / "mic.mrc").read_bytes())})
    assert "contrast" in assert_problem(refused, 400, "invalid-parameter")["detail"]
    assert_problem(client.post("/v1/upload/preview", data={"cmap": "jet"},
                               files={"file": ("mic.mrc", (tmp_path / "mic.mrc").read_bytes())}), 400,
                   "invalid-parameters")


def test_paths_and_jobs_write_pictures_under_the_root(tmp_path, make_client):
    root = tmp_path / "root"
    root.mkdir()
    volume = random_values((6, 10, 12), seed=7)
    write_mrc(root / "vol.mrc", volume, voxel_size=1.0)
    client = make_client(data_root=root)
    done = client.post("/v1/paths/preview", json={"src": "vol.mrc", "dst": "vol.png", "slice": "x", "bin": 1})
    assert done.status_code == 201, done.text
    np.testing.assert_array_equal(np.asarray(decoded(root / "vol.png")), sigma_levels(volume[:, :, 6]))
    bad = client.post("/v1/paths/preview", json={"src": "vol.mrc", "dst": "vol.tif"})
    assert ".png" in assert_problem(bad, 400, "invalid-parameter")["detail"] and not (root / "vol.tif").exists()
    assert sorted(p.name for p in root.iterdir() if p.name != ".noa-jobs") == ["vol.mrc", "vol.png"]  # no partial file
    job = client.post("/v1/jobs", json={"operation": "preview", "src": "vol.mrc", "dst": "job.jpg",
                                        "projection": "z", "cmap": "ice"})
    assert job.status_code == 202, job.text
    assert wait_job(client, job.headers["location"], 60)["status"] == "succeeded"
    assert decoded(root / "job.jpg").mode == "RGB"
    assert decoded(root / "job.jpg").size == (12 * 85, 10 * 85)  # magnified: 85 x 12 is the most within 1024


def test_the_bundled_map_with_a_scale_bar(tmp_path):
    result = noa("preview", EXAMPLE_MAP, tmp_path / "map.png", "--scale-bar", "--cmap", "viridis")
    assert result.returncode == 0, result.stderr
    # 20^3: magnified 16 times, the most whose three panels fit 1024 pixels (issue 40 item 8: 68 x 20 pixels)
    assert decoded(tmp_path / "map.png").size == (3 * 20 * 16 + 2 * GAP, 20 * 16)
