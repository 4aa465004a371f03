// edits.json: the FFN feature slots that compiled knowledge edits wrote (docs/vindex-format.md
// "edits.json"). LQL's COMPILE INTO VINDEX writes it (the source's record plus the session's
// edits), `larql extract` of such a vindex carries it, `larql verify` checks it, and USE reads it
// so a later COMPOSE INSERT never picks a slot a compiled edit holds (which would erase that fact).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace larql::vindex {

/// One edited slot: feature `feature` of layer `layer`, written by an op ("insert", "update" or
/// "delete"); entity / relation / target are the fact of an insert (empty otherwise).
struct EditedSlot {
  int64_t layer = 0, feature = 0;
  std::string op;
  std::string entity, relation, target;
};

/// Parse edits.json text: {"version": 1, "slots": [{"layer", "feature", "op", ["entity",
/// "relation", "target"]}, ...]}. Errors: Error{Format} naming `name`, the slot index and the key
/// (bad JSON, version != 1, a missing or mistyped key, a negative layer / feature, an op other
/// than insert / update / delete, a (layer, feature) given twice).
std::vector<EditedSlot> parse_edited_slots(const std::string& text, const std::string& name = "edits.json");
/// The JSON text (2-space indent), slots sorted by (layer, feature).
std::string serialize_edited_slots(const std::vector<EditedSlot>& slots);
/// DIR/edits.json; empty when the file is absent. Errors: parse_edited_slots's, Io.
std::vector<EditedSlot> read_edited_slots(const std::string& dir);
/// Merge `later` into `slots`: a slot in both takes `later`'s record. Sorted by (layer, feature).
std::vector<EditedSlot> merge_edited_slots(std::vector<EditedSlot> slots, const std::vector<EditedSlot>& later);

}  // namespace larql::vindex
