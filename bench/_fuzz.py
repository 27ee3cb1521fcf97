"""Generated-input fuzzing of the decoders that read bytes from the network.

Not a test: it runs for a chosen number of inputs (``python -m bench fuzz``) and reports,
per target, how many inputs it fed, how many were refused with the decoder's own typed
error, and any other exception ("crash") or input slower than the hang threshold. The
inputs are mutations of valid encodings (bit flips, truncations, extensions, spliced
bytes, rewritten header fields) mixed with random bytes, from a fixed seed, so a run can
be repeated exactly.
"""

from __future__ import annotations

import argparse
import random
import struct
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from liftbridge_sync import AckPolicy
from liftbridge_sync._proto import api_pb2
from liftbridge_sync._transport.h2 import framing
from liftbridge_sync.envelope import (
    MessageType,
    encode_envelope,
    new_message,
    unmarshal_ack,
    unmarshal_message,
)
from liftbridge_sync.errors import EnvelopeError
from liftbridge_sync.sbp import Frame, FrameDecoder, Opcode, SBPError, encode_frame

#: An input that takes longer than this is reported as a (potential) hang.
HANG_SECONDS = 0.5


@dataclass
class Outcome:
    """Counts for one target."""

    target: str
    inputs: int = 0
    refused: int = 0
    crashes: list[str] = field(default_factory=list)
    slowest: float = 0.0
    seconds: float = 0.0


def _seeds_envelope(rng: random.Random) -> list[bytes]:
    seeds = [
        new_message(b"v", key=b"k", headers={"h": b"x"}, ack_inbox="in", correlation_id="c"),
        new_message(b"", crc=False),
        new_message(b"x" * 300, ack_policy=AckPolicy.NONE, expected_offset=7),
    ]
    ack = api_pb2.Ack(stream="s", partitionSubject="s", msgSubject="s", offset=3)
    seeds.append(encode_envelope(ack.SerializeToString(), MessageType.ACK, crc=True))
    seeds.append(encode_envelope(ack.SerializeToString(), MessageType.ACK, crc=False))
    return seeds


def _seeds_sbp(rng: random.Random) -> list[bytes]:
    frames = [
        Frame(opcode=Opcode.PING, stream_id=1, payload=b"p"),
        Frame(opcode=list(Opcode)[-1], stream_id=7, header=b"hdr", payload=b"x" * 50),
    ]
    return [b"".join(encode_frame(f) for f in frames), encode_frame(frames[0])]


def _seeds_h2(rng: random.Random) -> list[bytes]:
    def frame(kind: int, flags: int, stream: int, payload: bytes) -> bytes:
        return framing.FRAME_HEADER.pack(len(payload) << 8 | kind, flags, stream) + payload

    ack = api_pb2.PublishResponse(ack=api_pb2.Ack(stream="s", offset=1, correlationId="c"))
    body = ack.SerializeToString()
    grpc_message = framing.PREFIX.pack(0, len(body)) + body
    return [
        frame(framing.SETTINGS, 0, 0, b"\x00\x04\x00\x01\x00\x00")
        + frame(framing.DATA, 0, 1, grpc_message * 3)
        + frame(framing.PING, 0, 0, b"12345678"),
        frame(framing.GOAWAY, 0, 0, b"\x00" * 8) + frame(framing.RST_STREAM, 0, 1, b"\x00" * 4),
        frame(framing.DATA, framing.PADDED, 1, b"\x02" + grpc_message + b"\x00\x00"),
    ]


def _h2(data: bytes) -> None:
    """Our own HTTP/2 reader: split frames, then the gRPC messages in DATA frames."""
    frames, _ = framing.split_frames(data, max_size=1 << 14)
    body = bytearray()
    for kind, _flags, _stream, start, end in frames:
        if kind == framing.DATA:
            body += data[start:end]
    framing.split_messages(body, max_size=1 << 16)


def _mutate(rng: random.Random, seed: bytes) -> bytes:
    data = bytearray(seed)
    for _ in range(rng.randint(1, 4)):
        choice = rng.randrange(7)
        if choice == 0 and data:  # flip bits
            i = rng.randrange(len(data))
            data[i] ^= 1 << rng.randrange(8)
        elif choice == 1 and data:  # truncate
            del data[rng.randrange(len(data)) :]
        elif choice == 2:  # extend with random bytes
            data += rng.randbytes(rng.randint(1, 64))
        elif choice == 3 and data:  # overwrite a byte with an extreme value
            data[rng.randrange(len(data))] = rng.choice((0, 1, 0x7F, 0x80, 0xFF))
        elif choice == 4 and len(data) >= 4:  # rewrite a 32-bit field
            i = rng.randrange(len(data) - 3)
            value = rng.choice((0, 1, 0x7FFFFFFF, 0xFFFFFFFF, rng.getrandbits(32)))
            data[i : i + 4] = struct.pack(">I", value)
        elif choice == 5 and data:  # splice a slice elsewhere
            a, b = sorted(rng.randrange(len(data) + 1) for _ in range(2))
            data[rng.randrange(len(data) + 1) :] = data[a:b]
        else:  # pure random
            data = bytearray(rng.randbytes(rng.randint(0, 96)))
    return bytes(data)


def _inputs(rng: random.Random, seeds: list[bytes], count: int) -> Iterator[bytes]:
    for _ in range(count):
        yield _mutate(rng, rng.choice(seeds))


def _envelope(data: bytes) -> None:
    try:
        unmarshal_message(data)
    except EnvelopeError:
        pass
    unmarshal_ack(data)


def _sbp(data: bytes) -> None:
    decoder = FrameDecoder(max_frame_size=1 << 16)
    half = len(data) // 2
    decoder.feed(data[:half])
    decoder.feed(data[half:])
    decoder.close()


TARGETS: dict[
    str, tuple[Callable[[random.Random], list[bytes]], Callable[[bytes], None], type[Exception]]
] = {
    "envelope": (_seeds_envelope, _envelope, EnvelopeError),
    "sbp": (_seeds_sbp, _sbp, SBPError),
    "h2": (_seeds_h2, _h2, framing.FrameError),
}


def run_target(name: str, count: int, seed: int) -> Outcome:
    """Feed ``count`` generated inputs to one target."""
    make_seeds, decode, refusal = TARGETS[name]
    rng = random.Random(seed)
    outcome = Outcome(name)
    began = time.perf_counter()
    for data in _inputs(rng, make_seeds(rng), count):
        start = time.perf_counter()
        try:
            decode(data)
        except refusal:
            outcome.refused += 1
        except Exception as exc:  # anything else is a finding
            if len(outcome.crashes) < 20:
                outcome.crashes.append(f"{type(exc).__name__}: {exc} <- {data.hex()}")
        took = time.perf_counter() - start
        outcome.slowest = max(outcome.slowest, took)
        outcome.inputs += 1
    outcome.seconds = time.perf_counter() - began
    return outcome


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``python -m bench fuzz``."""
    parser.add_argument("--inputs", type=int, default=1_000_000, help="inputs per target")
    parser.add_argument("--seed", type=int, default=20261123)
    parser.add_argument("targets", nargs="*", default=sorted(TARGETS), help="which decoders")


def main(args: argparse.Namespace) -> int:
    """Run the fuzzers; exit status 1 if anything crashed or hung."""
    failed = False
    print("| target | inputs | refused (typed error) | crashes | slowest input | time |")
    print("|---|---|---|---|---|---|")
    for name in args.targets:
        outcome = run_target(name, args.inputs, args.seed)
        hung = outcome.slowest > HANG_SECONDS
        failed |= bool(outcome.crashes) or hung
        print(
            f"| {name} | {outcome.inputs:,} | {outcome.refused:,} | {len(outcome.crashes)} | "
            f"{outcome.slowest * 1e3:.2f} ms | {outcome.seconds:.0f} s |",
            flush=True,
        )
        for crash in outcome.crashes:
            print(f"  crash: {crash[:300]}")
    return 1 if failed else 0
