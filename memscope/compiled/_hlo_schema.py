"""The part of XLA's ``HloModuleProto`` that memscope reads, declared by field number.

Protobuf skips fields a schema does not declare, so a subset that keeps XLA's own
field numbers (``xla/service/hlo.proto``, ``xla/xla_data.proto``) decodes XLA's
serialized modules faithfully, with no generated code and no protoc. The tests
check every field used here against the module's own text form.
"""

from __future__ import annotations

from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

_F = descriptor_pb2.FieldDescriptorProto
_SCALARS = {
    "string": _F.TYPE_STRING,
    "int64": _F.TYPE_INT64,
    "int32": _F.TYPE_INT32,  # also XLA's enums: same varint on the wire
    "bool": _F.TYPE_BOOL,
    "bytes": _F.TYPE_BYTES,
}

# message -> [(field, number, type, repeated)]; a type not in _SCALARS is a message.
_SCHEMA: dict[str, list[tuple[str, int, str, bool]]] = {
    "OpMetadata": [
        ("op_type", 1, "string", False),
        ("op_name", 2, "string", False),
        ("source_file", 3, "string", False),
        ("source_line", 4, "int32", False),
        ("stack_frame_id", 15, "int32", False),
    ],
    "ShapeProto": [
        ("element_type", 2, "int32", False),
        ("dimensions", 3, "int64", True),
        ("tuple_shapes", 4, "ShapeProto", True),
    ],
    "HloInstructionProto": [
        ("name", 1, "string", False),
        ("opcode", 2, "string", False),
        ("shape", 3, "ShapeProto", False),
        ("metadata", 7, "OpMetadata", False),
        ("parameter_number", 9, "int64", False),
        ("tuple_index", 13, "int64", False),
        ("id", 35, "int64", False),
        ("operand_ids", 36, "int64", True),
        ("called_computation_ids", 38, "int64", True),
    ],
    "HloComputationProto": [
        ("name", 1, "string", False),
        ("instructions", 2, "HloInstructionProto", True),
        ("id", 5, "int64", False),
        ("root_id", 6, "int64", False),
    ],
    "AliasEntryProto": [
        ("output_shape_index", 1, "int64", True),
        ("parameter_number", 2, "int64", False),
        ("parameter_shape_index", 3, "int64", True),
        ("kind", 4, "int32", False),
    ],
    "HloInputOutputAliasProto": [("entries", 1, "AliasEntryProto", True)],
    "BufferDonorEntryProto": [
        ("parameter_number", 1, "int64", False),
        ("parameter_shape_index", 2, "int64", True),
    ],
    "HloBufferDonorProto": [("entries", 1, "BufferDonorEntryProto", True)],
    "HloModuleProto": [
        ("name", 1, "string", False),
        ("entry_computation_name", 2, "string", False),
        ("computations", 3, "HloComputationProto", True),
        ("entry_computation_id", 6, "int64", False),
        ("input_output_alias", 8, "HloInputOutputAliasProto", False),
        ("buffer_donor", 18, "HloBufferDonorProto", False),
        ("stack_frame_index", 17, "StackFrameIndexProto", False),
        ("schedule", 7, "HloScheduleProto", False),
    ],
    # The order XLA runs each sequential computation in (hlo.proto: HloScheduleProto).
    # ``sequences`` is a proto map (computation id -> sequence): on the wire a
    # repeated message of key 1 and value 2.
    "InstructionSequence": [("instruction_ids", 1, "int64", True)],
    "ScheduleEntry": [
        ("key", 1, "int64", False),
        ("value", 2, "InstructionSequence", False),
    ],
    "HloScheduleProto": [("sequences", 1, "ScheduleEntry", True)],
    # Source locations: newer XLA keeps them once per module, and each
    # instruction's metadata names its innermost frame (1-based ids, 0 = none).
    "FileLocation": [
        ("file_name_id", 1, "int32", False),
        ("function_name_id", 2, "int32", False),
        ("line", 3, "int32", False),
        ("column", 4, "int32", False),
    ],
    "StackFrame": [
        ("file_location_id", 1, "int32", False),
        ("parent_frame_id", 2, "int32", False),
    ],
    "StackFrameIndexProto": [
        ("file_names", 1, "string", True),
        ("function_names", 2, "string", True),
        ("file_locations", 3, "FileLocation", True),
        ("stack_frames", 4, "StackFrame", True),
    ],
    # XLA's buffer assignment (hlo.proto: BufferAssignmentProto and the
    # messages it holds), as ``memory_analysis()`` serializes it.
    "BufferLocation": [  # LogicalBufferProto.Location
        ("instruction_name", 2, "string", False),
        ("shape_index", 3, "int64", True),
        ("instruction_id", 4, "int64", False),
    ],
    "LogicalBufferProto": [
        ("id", 1, "int64", False),
        ("size", 2, "int64", False),
        ("defined_at", 3, "BufferLocation", False),
        ("color", 4, "int64", False),
    ],
    "Assigned": [  # BufferAllocationProto.Assigned
        ("logical_buffer_id", 1, "int64", False),
        ("offset", 2, "int64", False),
        ("size", 3, "int64", False),
    ],
    "BufferAllocationProto": [
        ("index", 1, "int64", False),
        ("size", 2, "int64", False),
        ("is_thread_local", 3, "bool", False),
        ("is_entry_computation_parameter", 5, "bool", False),
        ("parameter_number", 6, "int64", False),
        ("maybe_live_out", 7, "bool", False),
        ("color", 8, "int64", False),
        ("assigned", 9, "Assigned", True),
        ("parameter_shape_index", 10, "int64", True),
        ("is_tuple", 11, "bool", False),
        ("is_constant", 12, "bool", False),
    ],
    "HeapEvent": [  # HeapSimulatorTrace.Event; kind: ALLOC 0, FREE 1, SHARE_WITH 2
        ("kind", 1, "int32", False),
        ("buffer_id", 2, "int64", False),
        ("computation_name", 3, "string", False),
        ("instruction_name", 4, "string", False),
        ("share_with_canonical_id", 5, "int64", False),
    ],
    "HeapSimulatorTrace": [
        ("events", 1, "HeapEvent", True),
        ("whole_module_simulation", 2, "bool", False),
        ("buffer_allocation_index", 3, "int64", False),
    ],
    "BufferAlias": [  # BufferAssignmentProto.BufferAlias
        ("source_buffer_id", 1, "int64", False),
        ("location", 2, "BufferLocation", False),
    ],
    "BufferAssignmentProto": [
        ("logical_buffers", 1, "LogicalBufferProto", True),
        ("buffer_aliases", 2, "BufferAlias", True),
        ("buffer_allocations", 3, "BufferAllocationProto", True),
        ("heap_simulator_traces", 4, "HeapSimulatorTrace", True),
    ],
    # A serialized executable (``LoadedExecutable.serialize()``), where a
    # backend's ``memory_analysis()`` carries no buffer assignment (XLA:GPU's
    # PJRT plugin): PJRT's ExecutableAndOptionsProto
    # (xla/pjrt/proto/executable_metadata.proto) holds the backend's
    # CompilationResultProto, whose field 2 is the BufferAssignmentProto in
    # XLA:CPU's (xla/service/cpu/executable.proto) and XLA:GPU's
    # (xla/service/gpu/executable.proto) alike. Kept as bytes: decoded by
    # read_buffer_assignment like memory_analysis()'s own.
    # XLA's dump of an optimized module with its buffer assignment
    # (``--xla_dump_hlo_as_proto``: ``*.after_optimizations.hlo.pb``), where the
    # compiler gives it nowhere else (XLA:TPU): hlo.proto's HloProto.
    "HloProto": [("hlo_module", 1, "bytes", False), ("buffer_assignment", 3, "bytes", False)],
    "ExecutableAndOptionsProto": [("serialized_executable", 1, "bytes", False)],
    "CompilationResultProto": [("buffer_assignment", 2, "bytes", False)],
}

_PACKAGE = "memscope.xla"


def _build_pool() -> descriptor_pool.DescriptorPool:
    file = descriptor_pb2.FileDescriptorProto(
        name="memscope/xla_subset.proto", package=_PACKAGE, syntax="proto3")
    for message, fields in _SCHEMA.items():
        desc = file.message_type.add(name=message)
        for name, number, kind, repeated in fields:
            field = desc.field.add(name=name, number=number)
            field.label = _F.LABEL_REPEATED if repeated else _F.LABEL_OPTIONAL
            if kind in _SCALARS:
                field.type = _SCALARS[kind]
            else:
                field.type = _F.TYPE_MESSAGE
                field.type_name = f".{_PACKAGE}.{kind}"
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    return pool


_POOL = _build_pool()


def message_class(name: str) -> Any:
    """The generated class of one declared message, e.g. ``HloModuleProto``."""
    return message_factory.GetMessageClass(_POOL.FindMessageTypeByName(f"{_PACKAGE}.{name}"))


HloModuleProto = message_class("HloModuleProto")
