#!/usr/bin/env python3
"""Reads rig's TensorBoard event files with TensorBoard's own reader.

    check_tfevents.py PATH [--expect TAG@STEP=VALUE ...] [--unit-sample]

PATH is an event file or a folder (every events.out.tfevents.* in it is read).
Checks, for every file: each record's length and data CRC-32C (this script's
own CRC and, cross-checked, tensorboard.compat.tensorflow_stub's), that the
first event carries file_version "brain.Event:2", and then, through
tensorboard's EventAccumulator and the reader behind its web UI's scalars
plugin, that each expected TAG has one scalar at STEP equal to VALUE as a
float32 (VALUE may be nan, inf or -inf).

--unit-sample expects the scalars tests/unit/test_summaries.cpp writes
(sample_writes() there; keep the two in sync); run that test with
RIG_TFEVENTS_OUT=DIR to leave its file in DIR.

Exit status: 0 all checks pass, 1 a check failed, 2 usage, 77 tensorboard is
not installed (ctest: SKIP_RETURN_CODE 77).
"""

import argparse
import math
import os
import struct
import sys

try:
    from tensorboard.backend.event_processing import plugin_event_accumulator
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.compat.proto import event_pb2
    from tensorboard.compat.tensorflow_stub import pywrap_tensorflow as tb_stub
    from tensorboard.util import tensor_util
except ImportError as e:  # pragma: no cover - depends on the machine
    print(f"SKIP: tensorboard is not importable ({e}); pip install tensorboard", file=sys.stderr)
    sys.exit(77)

# Mirrors sample_writes() in tests/unit/test_summaries.cpp.
UNIT_SAMPLE = [
    ("train_loss", 0, 2.5), ("learning_rate", 0, 0.1), ("time/forward", 0, 0.0125),
    ("train_loss", 10, 1.25), ("learning_rate", 10, 0.05), ("loss_scale", 10, 0.0),
    ("train_loss", 300000, math.nan), ("eval_loss", 300000, math.inf),
    ("eval_BLEU", 300000, -math.inf),
    ("train_loss", 5000000000, 0.375), ("eval_accuracy", 5000000000, 0.96875),
]


def crc32c(data):
    """Bitwise CRC-32C (Castagnoli), independent of tensorboard's table."""
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def masked(crc):
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


def both_crcs(data):
    """The masked CRC-32C of `data` by this script and by tensorboard."""
    return (("own", masked(crc32c(data))), ("tensorboard", tb_stub.masked_crc32c(data)))


def read_records(path):
    """The data of every TFRecord in `path`; raises ValueError on any bad CRC."""
    with open(path, "rb") as f:
        blob = f.read()
    records, at = [], 0
    while at < len(blob):
        n = len(records)
        if len(blob) - at < 12:
            raise ValueError(f"{path}: record {n}: truncated header")
        header = blob[at:at + 8]
        (length,) = struct.unpack("<Q", header)
        (length_crc,) = struct.unpack("<I", blob[at + 8:at + 12])
        for name, crc in both_crcs(header):
            if crc != length_crc:
                raise ValueError(f"{path}: record {n}: length CRC mismatch ({name} CRC)")
        if len(blob) - at - 12 < length + 4:
            raise ValueError(f"{path}: record {n}: truncated")
        data = blob[at + 12:at + 12 + length]
        (data_crc,) = struct.unpack("<I", blob[at + 12 + length:at + 16 + length])
        for name, crc in both_crcs(data):
            if crc != data_crc:
                raise ValueError(f"{path}: record {n}: data CRC mismatch ({name} CRC)")
        records.append(data)
        at += 16 + length
    return records


def check_file(path):
    """Every CRC, TensorBoard's own record reader, and the file_version event."""
    records = read_records(path)
    if not records:
        raise ValueError(f"{path}: no records")
    # TensorBoard's pure-Python reader (it raises DataLossError on a bad CRC).
    reader = tb_stub.PyRecordReader_New(path.encode())
    seen = 0
    while True:
        try:
            reader.GetNext()
        except Exception as e:  # OutOfRangeError at the end
            if type(e).__name__ != "OutOfRangeError":
                raise ValueError(f"{path}: tensorboard's reader: {e}") from e
            break
        if reader.record() != records[seen]:
            raise ValueError(f"{path}: record {seen} differs between readers")
        seen += 1
    if seen != len(records):
        raise ValueError(f"{path}: tensorboard read {seen} records, expected {len(records)}")
    first = event_pb2.Event.FromString(records[0])
    if first.file_version != "brain.Event:2":
        raise ValueError(f"{path}: first event's file_version is {first.file_version!r}")
    for data in records[1:]:
        event_pb2.Event.FromString(data)  # every record parses as an Event
    return len(records)


def same_float32(actual, expected):
    if math.isnan(expected):
        return math.isnan(actual)
    return struct.pack("<f", actual) == struct.pack("<f", expected)


def parse_expect(text):
    try:
        tag_step, value = text.rsplit("=", 1)
        tag, step = tag_step.rsplit("@", 1)
        return tag, int(step), float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected TAG@STEP=VALUE, got {text!r}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("path", help="an events.out.tfevents.* file or a folder of them")
    parser.add_argument("--expect", type=parse_expect, action="append", default=[],
                        metavar="TAG@STEP=VALUE")
    parser.add_argument("--unit-sample", action="store_true",
                        help="expect the scalars tests/unit/test_summaries.cpp writes")
    args = parser.parse_args()
    expected = list(args.expect) + (UNIT_SAMPLE if args.unit_sample else [])

    if os.path.isdir(args.path):
        files = sorted(os.path.join(args.path, n) for n in os.listdir(args.path)
                       if n.startswith("events.out.tfevents."))
    else:
        files = [args.path]
    if not files:
        print(f"FAIL: no events.out.tfevents.* file in {args.path}", file=sys.stderr)
        return 1
    failures = []
    for path in files:
        try:
            print(f"ok: {path}: {check_file(path)} records, every CRC checked")
        except (ValueError, OSError) as e:
            failures.append(str(e))

    # One accumulator per file: given a folder, TensorBoard would treat it as
    # a single file whenever the folder's own name contains "tfevents".
    scalars = {}  # tag -> [ScalarEvent]
    for path in files:
        accumulator = EventAccumulator(path, size_guidance={"scalars": 0})
        accumulator.Reload()
        if accumulator.file_version != 2:
            failures.append(f"{path}: file_version {accumulator.file_version}, expected 2")
        for tag in accumulator.Tags()["scalars"]:
            scalars.setdefault(tag, []).extend(accumulator.Scalars(tag))
    # What TensorBoard's web UI reads: simple_value migrated to scalar tensors
    # of the "scalars" plugin.
    ui_scalars = {}  # tag -> [(step, value)]
    for path in files:
        accumulator = plugin_event_accumulator.EventAccumulator(path, size_guidance={"tensors": 0})
        accumulator.Reload()
        for tag in accumulator.Tags()["tensors"]:
            if accumulator.SummaryMetadata(tag).plugin_data.plugin_name != "scalars":
                failures.append(f"{tag}: not shown as a scalar by TensorBoard")
            ui_scalars.setdefault(tag, []).extend(
                (e.step, float(tensor_util.make_ndarray(e.tensor_proto)))
                for e in accumulator.Tensors(tag))

    matched = 0
    for tag, step, value in expected:
        if tag not in scalars or tag not in ui_scalars:
            failures.append(f"{tag}: no such scalar tag (found {sorted(scalars)})")
            continue
        readers = (("EventAccumulator", [e.value for e in scalars[tag] if e.step == step]),
                   ("scalars plugin", [v for s, v in ui_scalars[tag] if s == step]))
        for reader, values in readers:
            if len(values) != 1:
                failures.append(f"{tag}@{step}: {len(values)} values in the {reader}, expected 1")
                break
            if not same_float32(values[0], value):
                failures.append(f"{tag}@{step}: {values[0]!r} in the {reader}, expected {value!r}")
                break
        else:
            matched += 1
    if expected:
        print(f"{'ok' if matched == len(expected) else 'FAIL'}: {matched} of {len(expected)} "
              "expected scalars match (EventAccumulator and the scalars plugin's reader)")
    for failure in failures:
        print(f"FAIL: {failure}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
