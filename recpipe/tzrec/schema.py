"""The part of TorchEasyRec's ``tzrec.protos`` schema the importer reads, built as protobuf descriptors.

Message, field and enum names and field numbers are TorchEasyRec's (``tzrec/protos/*.proto``, proto2),
so a config parses here exactly as it does there, restricted to the fields recpipe can honour; a field
outside this subset is reported as unsupported instead of being dropped. No ``.proto`` compiler is
needed: the descriptors are written as a text-format ``FileDescriptorProto`` (``supported.pbtxt`` beside this
module, data read by protobuf's own parser) and added to a private :class:`DescriptorPool` (not the default
one, so a real ``tzrec`` install in the same process is unaffected).

One deliberate difference: TorchEasyRec's ``float`` fields are ``double`` here, so ``lr: 0.001`` and
``boundaries: [1.12]`` come back as the decimals written rather than their float32 neighbours.

Example::

    cfg = message_class("EasyRecConfig")()
    text_format.Parse('model_dir: "x" data_config { batch_size: 64 }', cfg)
    cfg.data_config.batch_size, cfg.data_config.num_workers   # (64, 8): TorchEasyRec's default
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory, text_format
from google.protobuf.descriptor import Descriptor
from google.protobuf.message import Message

PACKAGE = "tzrec.protos"
ROOT = "EasyRecConfig"
# The names of TorchEasyRec's ``ModelConfig.model`` oneof (tzrec/protos/model.proto): an unsupported one
# is reported as an unsupported model rather than as an unknown field.
TZREC_MODELS = frozenset(
    "dlrm deepfm multi_tower multi_tower_din mask_net wide_and_deep dcn_v1 dcn_v2 xdeepfm wukong "
    "simple_multi_task mmoe dbmtl ple dc2vr dlrm_hstu pepnet ultra_hstu dssm dssm_v2 dat hstu_match mind "
    "tdm rocket_launching sid_rqvae sid_rqkmeans".split()
)


SCHEMA_FILE = Path(__file__).with_name("supported.pbtxt")


def file_descriptor_proto() -> descriptor_pb2.FileDescriptorProto:
    """The supported subset as one proto2 ``FileDescriptorProto`` in package ``tzrec.protos``."""
    fdp = text_format.Parse(SCHEMA_FILE.read_text(), descriptor_pb2.FileDescriptorProto())
    if fdp.package != PACKAGE:
        raise ValueError(f"{SCHEMA_FILE}: package {fdp.package!r}, expected {PACKAGE!r}")
    return fdp


@cache
def _pool() -> descriptor_pool.DescriptorPool:
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file_descriptor_proto())
    return pool


def descriptor(name: str = ROOT) -> Descriptor:
    """The descriptor of message ``name`` (e.g. ``"IdFeature"``)."""
    return _pool().FindMessageTypeByName(f"{PACKAGE}.{name}")


def message_class(name: str = ROOT) -> type[Message]:
    """The generated message class of ``name``; ``message_class()()`` is an empty ``EasyRecConfig``."""
    return message_factory.GetMessageClass(descriptor(name))


def new_config() -> Any:
    """An empty ``EasyRecConfig`` message."""
    return message_class(ROOT)()
