"""labkit.huge_pages: reading coverage and the mappings to collapse from /proc's text, and settling on any host."""

from __future__ import annotations

from pathlib import Path

from labkit import huge_pages

MiB = 2**20


def test_coverage_reads_anonymous_and_huge_bytes(tmp_path: Path) -> None:
    rollup = tmp_path / "smaps_rollup"
    rollup.write_text("00400000-7ffd [rollup]\nRss:  900 kB\nAnonymous:   4096 kB\nAnonHugePages:   2048 kB\n")
    found = huge_pages.coverage(rollup)
    assert found == huge_pages.Coverage(4096 * 1024, 2048 * 1024)


def test_coverage_is_none_where_it_cannot_be_read(tmp_path: Path) -> None:
    assert huge_pages.coverage(tmp_path / "missing") is None
    broken = tmp_path / "smaps_rollup"
    broken.write_text("Anonymous: many kB\n")
    assert huge_pages.coverage(broken) is None


def test_only_whole_huge_pages_of_private_writable_anonymous_mappings_are_collapsed(tmp_path: Path) -> None:
    maps = tmp_path / "maps"
    start = 0x7F0000100000  # 1 MiB past a 2 MiB boundary
    end = start + 7 * MiB
    maps.write_text("\n".join([
        f"{start:x}-{end:x} rw-p 00000000 00:00 0 ",  # anonymous: 3 MiB into its first whole page, 6 MiB whole
        f"{end:x}-{end + 8 * MiB:x} rw-p 00000000 08:01 1234 /usr/lib/libtorch.so",  # a file
        f"{end + 8 * MiB:x}-{end + 16 * MiB:x} rw-s 00000000 00:01 99 ",  # shared memory
        f"{end + 16 * MiB:x}-{end + 24 * MiB:x} r--p 00000000 00:00 0 ",  # read-only
        f"{end + 24 * MiB:x}-{end + 32 * MiB:x} rw-p 00000000 00:00 0 [stack]",  # named
        "7f0001000000-7f0001100000 rw-p 00000000 00:00 0 ",  # 1 MiB: no whole huge page inside
        "7f0002000000-7f0002600000 rw-p 00000000 00:00 0 [heap]",  # the heap: small allocations live here
    ]) + "\n")
    first = -(-start // (2 * MiB)) * 2 * MiB
    assert huge_pages.anonymous_ranges(maps) == [(first, end // (2 * MiB) * 2 * MiB),
                                                 (0x7F0002000000, 0x7F0002600000)]


def test_settle_reports_what_it_did_on_any_host() -> None:
    settled = huge_pages.settle()
    assert settled.collapsed >= 0 and settled.seconds >= 0
    if settled.unavailable is None:  # it ran: coverage was read before and after
        assert settled.before is not None and settled.after is not None
        assert 0 <= settled.after.huge_bytes <= settled.after.anonymous_bytes
    else:
        assert settled.collapsed == 0
    record = settled.as_record()
    assert set(record) == {"before", "after", "collapsed", "refused", "seconds", "unavailable"}


def test_only_huge_pages_resident_throughout_are_collapsed() -> None:
    small = huge_pages.HUGE // huge_pages.PAGE
    base = 0x7F0000000000
    resident = b"\x01" * small + b"\x01" * (small - 1) + b"\x00" + b"\x01" * small * 2 + b"\x00" * small
    assert huge_pages.resident_runs(base, base + 5 * huge_pages.HUGE, resident) == [
        (base, base + huge_pages.HUGE), (base + 2 * huge_pages.HUGE, base + 4 * huge_pages.HUGE)]


def test_settling_leaves_memory_never_touched_untouched() -> None:
    import mmap

    # one byte written per 2 MiB, as a KV pool sized for the machine is written where its first blocks sit: the
    # rest of each huge page was never touched, and collapsing it would make all 64 MiB resident
    reserved = mmap.mmap(-1, 64 * MiB, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    try:
        for offset in range(0, 64 * MiB, 2 * MiB):
            reserved[offset] = 1
        before = huge_pages.coverage()
        settled = huge_pages.settle()
        if before is not None and settled.after is not None:
            assert settled.after.anonymous_bytes - before.anonymous_bytes < 16 * MiB
    finally:
        reserved.close()


def test_a_refused_huge_page_is_asked_for_again_and_counted_when_it_never_moves() -> None:
    import errno

    calls: list[int] = []

    def collapse(start: int) -> int:  # page 1 moves on its second try; page 3 never does
        calls.append(start)
        if start == 3 or (start == 1 and calls.count(1) == 1):
            return errno.ENOMEM
        return 0

    refused, errors = huge_pages.collapse_each([0, 1, 2, 3], collapse, tries=3)
    assert refused == [3] and errors == {errno.ENOMEM}
    assert calls == [0, 1, 2, 3, 1, 3, 3]  # every page once, then only the refused ones, up to three passes
    assert huge_pages.collapse_each([0, 1], lambda start: 0, tries=3) == ([], set())
