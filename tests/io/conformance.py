"""What every file format promises, tested once: each format's test module subclasses :class:`FormatTests`
(as zarr-python's stores subclass ``zarr.testing.store.StoreTests``), so a new format inherits every promise.

A subclass names its ``format`` and writes a ``sample`` of it with the format's reference library (or, for a
format no library writes, with the tests' own encoder), returning the values that library reads from it as a
BDHW array: the oracle. Formats that are written say how their reference library reads an output back
(``reference``); a format whose files are directories says how to damage one (``damage``).
"""

from __future__ import annotations

import dataclasses
import os
import re
from pathlib import Path

import numpy as np
import pytest

from noa_core import io
from noa_core.errors import FileFormatError, OutputExistsError, UnknownFormatError
from noa_core.io import formats, read_options
from noa_core.io.protocol import ImageFormat, IndexedFormat, StoreFormat
from noa_core.operations import spec

# A value asking for something, for every read option any format declares (a new option adds its own here).
GIVEN = {"as_stack": True, "as_volume": True, "series": 0, "channel": 0, "level": 0, "eer_group": 2,
         "eer_group_last": "keep", "eer_upsampling": 2, "gain": "gain.mrc", "gain_flip_y": True, "gain_rotate": 1,
         "project_dir": "project"}
# Read options the doors give as the sides of one true/false/unset switch, by the switch's parameter: MRC's
# as_stack and as_volume are --as-stack/--as-volume (unset: neither).
SWITCHED = {"as_stack": "as_stack", "as_volume": "as_stack"}


def _members(protocol: type) -> list[str]:
    """The attributes and methods a protocol declares (its own and those it inherits)."""
    names: list[str] = []
    for cls in reversed(protocol.__mro__):
        if cls is object or not getattr(cls, "_is_protocol", False):
            continue
        names += [name for name in getattr(cls, "__annotations__", {})]
        names += [name for name, value in vars(cls).items() if callable(value) and not name.startswith("_")]
    return list(dict.fromkeys(names))


def _snapshot(path: Path) -> dict[str, tuple[bytes, int]]:
    """Every file of ``path`` (itself, or a store's tree) with its bytes and modification time."""
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    return {str(p): (p.read_bytes(), p.stat().st_mtime_ns) for p in files}


class FormatTests:
    """The promises of :class:`noa_core.io.protocol.ImageFormat`; a format's tests subclass this."""

    format: ImageFormat

    def sample(self, folder: Path) -> tuple[Path, np.ndarray]:
        """A file (or store) of this format written in ``folder`` by its reference library, and the BDHW values
        that library reads from it."""
        raise NotImplementedError

    def reference(self, path: Path) -> np.ndarray:
        """The values the reference library reads from an output noa wrote (formats that are written)."""
        raise NotImplementedError

    def write(self, out: Path, values: np.ndarray, folder: Path, *, overwrite: bool = False) -> None:
        """Write ``values`` as an output of this format (an indexed format's: as the data its sample indexes)."""
        io.write(out, values, overwrite=overwrite)

    def damage(self, path: Path) -> None:
        """Damage a sample: a file is cut in half."""
        data = path.read_bytes()
        path.write_bytes(data[:len(data) // 2])

    # -- the declaration --------------------------------------------------------------------------

    def test_declares_every_member_of_the_protocol(self):
        fmt = self.format
        protocol = StoreFormat if fmt.store else IndexedFormat if fmt.indexed else ImageFormat
        missing = [name for name in _members(protocol) if not hasattr(fmt, name)]
        assert not missing, f"{fmt.name} lacks {missing}"
        assert isinstance(fmt.store, bool) and isinstance(fmt.compressed_input, bool) and isinstance(fmt.indexed, bool)
        assert isinstance(fmt.header_statistics, bool) and fmt.title and fmt.media_type
        assert fmt.extensions and all(e.startswith(".") and e == e.lower()
                                      for e in fmt.extensions + fmt.output_extensions)

    def test_is_registered_where_its_capabilities_say(self):
        fmt = self.format
        assert formats.by_name(fmt.name) is fmt
        assert (fmt in formats.STORES) == fmt.store
        assert (fmt in formats.MOVIES) == (not fmt.output_extensions)  # read only: no output extension
        assert (fmt in formats.DATASETS) == fmt.indexed
        assert sum(fmt in registry for registry in (formats.FORMATS, formats.MOVIES, formats.STORES,
                                                    formats.DATASETS)) == 1

    def test_declares_its_read_options_once_as_a_dataclass(self):
        options = self.format.read_options
        assert dataclasses.is_dataclass(options) and options.__dataclass_params__.frozen
        declared = read_options.fields()
        for f in dataclasses.fields(options):
            # the one declaration of the option: formats sharing it agree (the doors take one default)
            assert f.name in declared, f"{f.name} is not listed in noa_core.io.read_options.READ_OPTIONS"
            assert (f.default, f.metadata) == (declared[f.name].default, declared[f.name].metadata), f.name
        options()  # every option has its default
        own = read_options.names(options)
        labels = {f.metadata["label"] or name for name, f in declared.items() if name not in own}
        assert set(self.format.lacking) <= labels, "lacking names options the format takes, or none at all"

    def test_its_read_options_reach_every_door_with_their_defaults(self):
        reading = {param.name: param for param in spec.READING}
        for f in dataclasses.fields(self.format.read_options):
            param = reading[SWITCHED.get(f.name, f.name)]
            if f.name in SWITCHED:
                assert f"--{f.name.replace('_', '-')}" in param.cli_flags[0].split("/"), f.name
                assert (param.default, f.default) == (None, False), f.name
            else:
                assert param.default == f.default, f.name

    # -- reading ----------------------------------------------------------------------------------

    def test_detects_its_sample(self, tmp_path):
        path, _ = self.sample(tmp_path)
        assert formats.detect(path) == (self.format, None)

    def test_reads_what_the_reference_library_reads(self, tmp_path):
        path, expected = self.sample(tmp_path)
        array, metadata = io.read(path)
        assert array.dtype == expected.dtype and array.shape == expected.shape
        np.testing.assert_array_equal(array.numpy(), expected)
        assert metadata.format == self.format.name and tuple(metadata.shape) == expected.shape

    def test_probe_says_what_read_gives_from_the_header(self, tmp_path):
        path, _ = self.sample(tmp_path)
        probe = io.probe(path)
        array, metadata = io.read(path)
        assert (probe.shape, probe.strides, probe.dtype) == (array.shape, array.strides, array.dtype)
        assert (probe.metadata.format, probe.metadata.shape) == (metadata.format, metadata.shape)

    def test_reads_the_same_values_unmapped(self, tmp_path):
        path, expected = self.sample(tmp_path)
        np.testing.assert_array_equal(io.read(path, mmap=False)[0].numpy(), expected)

    def test_reading_changes_nothing(self, tmp_path):
        path, _ = self.sample(tmp_path)
        before = _snapshot(path)
        array, _ = io.read(path)
        array.numpy().sum()
        io.probe(path)
        assert _snapshot(path) == before

    def test_options_at_their_defaults_ask_for_nothing(self, tmp_path):
        path, expected = self.sample(tmp_path)
        defaults = {f.name: f.default for f in dataclasses.fields(self.format.read_options)}
        np.testing.assert_array_equal(io.read(path, **defaults)[0].numpy(), expected)

    def test_options_it_does_not_take_are_refused_naming_them(self, tmp_path):
        assert set(GIVEN) == set(read_options.fields()), "give every read option a value in GIVEN"
        path, _ = self.sample(tmp_path)
        own = read_options.names(self.format.read_options)
        for name, value in GIVEN.items():
            if name in own:
                continue
            for call in (io.read, io.probe):
                with pytest.raises(FileFormatError) as refused:
                    call(path, **{name: value})
                message = str(refused.value)
                assert message.startswith(f"{path}: ") and name in message.split(";")[0], message
                assert "\n" not in message and f"for {self.format.title}" not in message, message

    def test_a_damaged_input_is_one_error_naming_it(self, tmp_path):
        path, _ = self.sample(tmp_path)
        self.damage(path)
        with pytest.raises(FileFormatError) as refused:
            array, _ = io.read(path)
            array.numpy().sum()
        assert str(path) in str(refused.value) and "\n" not in str(refused.value)

    # -- writing ----------------------------------------------------------------------------------

    def _output(self, folder: Path, stem: str = "out") -> Path:
        if not self.format.output_extensions:
            pytest.skip(f"{self.format.title} is read, not written")
        return folder / (stem + self.format.output_extensions[0])

    def test_writes_what_its_reference_library_reads_back(self, tmp_path):
        out = self._output(tmp_path)
        _, expected = self.sample(tmp_path)
        self.write(out, expected, tmp_path)
        assert formats.detect(out) == (self.format, None)
        stored = self.reference(out)
        assert stored.dtype == expected.dtype
        np.testing.assert_array_equal(stored.reshape(-1), expected.reshape(-1))
        back, metadata = io.read(out)
        np.testing.assert_array_equal(back.numpy(), expected)
        assert metadata.format == self.format.name

    def test_an_existing_output_is_kept_unless_replacing_is_asked(self, tmp_path):
        out = self._output(tmp_path)
        _, expected = self.sample(tmp_path)
        other = np.ascontiguousarray(expected[..., ::-1])
        self.write(out, expected, tmp_path)
        before = _snapshot(out)
        with pytest.raises(OutputExistsError, match=re.escape(str(out))):
            self.write(out, other, tmp_path)
        assert _snapshot(out) == before
        self.write(out, other, tmp_path, overwrite=True)
        np.testing.assert_array_equal(io.read(out)[0].numpy(), other)

    def test_an_element_type_it_cannot_store_is_refused_with_no_output(self, tmp_path):
        out = self._output(tmp_path)
        with pytest.raises(FileFormatError, match=re.escape(str(out))):
            io.write(out, np.ones((2, 3), bool))
        assert os.listdir(tmp_path) == []

    def test_a_read_only_format_refuses_to_write(self, tmp_path):
        if self.format.output_extensions:
            pytest.skip(f"{self.format.title} is written")
        out = tmp_path / ("out" + self.format.extensions[0])
        with pytest.raises(FileFormatError, match=re.escape(str(out))):
            self.format.check_writable(np.dtype(np.float32), (1, 1, 2, 2), out)
        for ext in self.format.extensions:
            try:
                writer = formats.output_format(tmp_path / ("out" + ext))
            except UnknownFormatError:
                continue
            assert writer is not self.format  # another format's extension too (an EER movie named .tif)
