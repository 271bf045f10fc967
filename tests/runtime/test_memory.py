"""The trainer thread and the memory helpers behind flat RSS in long local runs (runtime.memory)."""

import asyncio
import platform
import threading

import pytest

from fireflash.runtime.memory import TrainerThread, memory_gb, peak_rss_gb, release_free_memory, rss_gb

pytestmark = pytest.mark.unit


def test_every_trainer_call_runs_on_one_dedicated_thread():
    async def main():
        thread = TrainerThread()
        # pool traffic in between, as sandbox calls make: to_thread would spread calls over its threads
        seen = set()
        for _ in range(6):
            await asyncio.gather(*(asyncio.to_thread(threading.get_ident) for _ in range(4)))
            seen.add(await thread.run(threading.get_ident, trim=True))
        thread.close()
        return seen

    seen = asyncio.run(main())
    assert len(seen) == 1 and threading.get_ident() not in seen


def test_a_trainer_error_reaches_the_caller_and_the_thread_keeps_serving():
    def boom():
        raise ValueError("bad batch")

    async def main():
        thread = TrainerThread()
        with pytest.raises(ValueError, match="bad batch"):
            await thread.run(boom, trim=True)
        value = await thread.run(sum, [1, 2, 3])
        thread.close()
        return value

    assert asyncio.run(main()) == 6


@pytest.mark.skipif(platform.system() != "Linux" or platform.libc_ver()[0] != "glibc", reason="glibc only")
def test_free_memory_parked_in_the_heap_goes_back_to_the_os():
    scratch = bytearray(8 << 20)
    del scratch  # freeing an 8 MiB mmap raises glibc's mmap threshold: 1 MiB blocks now come from the heap
    blocks = [bytearray(b"\x01" * (1 << 20)) for _ in range(400)]
    keep = blocks[1::2]  # every other block stays: the freed ones are holes the heap cannot trim by itself
    del blocks
    before = rss_gb()
    assert release_free_memory() is True
    freed_mib = (before - rss_gb()) * 1024
    assert freed_mib > 150, f"only {freed_mib:.0f} MiB of ~200 MiB of holes went back"
    rss, peak = memory_gb()
    assert len(keep) == 200 and 0 < rss <= peak and peak_rss_gb() > 0
