# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""module_utils._elf: the dynamic section of real objects compiled here, and the libstdc++ linkage they have."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from ansible_collections.gpufleet.deepep.plugins.module_utils._elf import (
    ElfError,
    dynamic_section,
    dynamic_section_of_bytes,
    libstdcxx_linkage,
)

CAPTURED = Path(__file__).resolve().parents[1] / "fixtures" / "captured" / "h200x4"

# What DeepEP V2's JIT runs at the first dispatch (csrc/jit/include_parser.hpp at dd758ca).
REGEX_CPP = r'''
#include <regex>
#include <string>
extern "C" int count_includes(const char* code) {
    const std::regex pattern(R"(#\s*include\s*[<"][^>"]+[>"])");
    std::string text(code);
    int n = 0;
    for (std::sregex_iterator it(text.begin(), text.end(), pattern), end; it != end; ++it) ++n;
    return n;
}
'''


def compile_shared(tmp_path: Path, name: str, *flags: str, source: str = REGEX_CPP, compiler: str = "g++") -> Path:
    src = tmp_path / (name + (".cpp" if compiler == "g++" else ".c"))
    src.write_text(source)
    out = tmp_path / (name + ".so")
    subprocess.run([compiler, "-O1", "-fPIC", "-shared", str(src), "-o", str(out), *flags], check=True, timeout=300)
    return out


@pytest.fixture(scope="module")
def objects(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("elf")
    return {
        "shared": compile_shared(tmp, "shared", "-Wl,-rpath,/opt/a:/opt/b", "-Wl,--enable-new-dtags",
                                 "-Wl,-soname,libshared.so.1"),
        "static": compile_shared(tmp, "static", "-static-libstdc++", "-Wl,-rpath,/opt/c", "-Wl,--disable-new-dtags"),
        "plain_c": compile_shared(tmp, "plain_c", source="int answer(void) { return 42; }\n", compiler="gcc"),
    }


def test_a_shared_libstdcxx_object_names_it_in_needed(objects):
    section = dynamic_section(objects["shared"])
    assert "libstdc++.so.6" in section["needed"] and "libc.so.6" in section["needed"]
    assert section["runpath"] == ["/opt/a", "/opt/b"] and section["rpath"] == []
    assert section["soname"] == "libshared.so.1"
    assert libstdcxx_linkage(section["needed"], objects["shared"].read_bytes()) == "shared"


def test_a_static_libstdcxx_object_is_told_apart_from_one_without_cxx(objects):
    static = dynamic_section(objects["static"])
    assert not any(name.startswith("libstdc++") for name in static["needed"])
    assert static["rpath"] == ["/opt/c"] and static["runpath"] == []
    assert libstdcxx_linkage(static["needed"], objects["static"].read_bytes()) == "static"
    plain = dynamic_section(objects["plain_c"])
    assert libstdcxx_linkage(plain["needed"], objects["plain_c"].read_bytes()) == "none"


def test_the_captured_v2_extension_needs_no_libstdcxx():
    # readelf -d of the V2 _C.so the platform's compiler linked with libstdc++.a (4 x H200): no libstdc++ in NEEDED,
    # while cuda-gdb places the crash in std::codecvt<char16_t>::do_unshift inside that same .so.
    text = (CAPTURED / "deepep_v2_linkage.txt").read_text()
    needed = [line.split("[", 1)[1].rstrip("]") for line in text.splitlines() if "(NEEDED)" in line]
    assert "libnccl.so.2" in needed and "libnvshmem_host.so.3" in needed
    assert libstdcxx_linkage(needed, b"") == "none"
    assert libstdcxx_linkage(needed, b"..._ZNSt6locale5_Impl...") == "static"
    backtrace = (CAPTURED / "deepep_v2_elastic_sigsegv_cuda-gdb_bt.txt").read_text()
    assert "codecvt<char16_t, char, __mbstate_t>::do_unshift" in backtrace and "IncludeParser::get_includes" in backtrace


@pytest.mark.parametrize("data, message", [
    (b"", "not an ELF object"),
    (b"#!/bin/sh\necho not elf\n" * 4, "not an ELF object"),
    (b"\x7fELF\x03\x01" + b"\0" * 60, "unknown ELF class"),
])
def test_what_is_not_elf_is_refused_by_name(data, message):
    with pytest.raises(ElfError, match=message) as info:
        dynamic_section_of_bytes(data, "x.so")
    assert "x.so" in str(info.value)


def test_a_truncated_object_is_refused(objects, tmp_path):
    data = objects["shared"].read_bytes()
    cut = tmp_path / "cut.so"
    cut.write_bytes(data[:200])
    with pytest.raises(ElfError, match="cut.so"):
        dynamic_section(cut)


def test_an_unreadable_path_names_itself(tmp_path):
    with pytest.raises(ElfError, match="cannot read .*missing.so"):
        dynamic_section(tmp_path / "missing.so")


def test_a_linker_script_is_not_an_object(tmp_path):
    script = tmp_path / "libfoo.so"
    script.write_text("INPUT(libfoo.so.1 AS_NEEDED(libbar.so))\n")
    with pytest.raises(ElfError, match="not an ELF object"):
        dynamic_section(script)


def test_readelf_agrees_where_it_is_installed(objects):
    readelf = shutil.which("readelf")
    if readelf is None:
        pytest.skip("readelf (binutils) is not installed; the other tests hold the same facts")
    for path in objects.values():
        out = subprocess.run([readelf, "-d", str(path)], capture_output=True, text=True, check=True).stdout
        needed = [line.split("[", 1)[1].rstrip("]") for line in out.splitlines() if "(NEEDED)" in line]
        assert dynamic_section(path)["needed"] == needed
