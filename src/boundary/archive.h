// Boundary frames and the per-sequence frame archive on disk (one file per sequence).
//
// File layout (little-endian; str = u32 length + bytes):
//   header: magic "LARQLBND" | u32 version (2) | str model fingerprint | str sequence id |
//           u64 archive uid | u32 hidden
//   frame:  u32 tag "FRM1" | u8 kind | u8 codec | u16 reserved (0) | u64 position |
//           u64 token_start | f32 log_prob_margin | f32 top1_prob | i32 top1_token |
//           u32 n_tokens | i32 tokens[n_tokens] | u32 payload_bytes | payload
//   end:    u32 tag "END2" | u64 XXH3-64 of every preceding byte
// Every write replaces the whole file atomically (util/atomic_file.h), so a crash leaves the
// archive as it was before the write or after it, never torn; the checksum catches damage.
// Frames cover the sequence's tokens contiguously from position 0: frame i's token_start is the
// previous frame's position + 1, and position = token_start + n_tokens - 1 (the position whose
// final-layer residual is the payload).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "boundary/codec.h"

namespace larql::boundary {

inline constexpr char kArchiveMagic[8] = {'L', 'A', 'R', 'Q', 'L', 'B', 'N', 'D'};
inline constexpr uint32_t kArchiveVersion = 2;
inline constexpr uint32_t kFrameTag = 0x314d5246;  // "FRM1"
inline constexpr uint32_t kEndTag = 0x32444e45;    // "END2"

enum class FrameKind : uint8_t {
  Boundary = 1,  ///< the end of a full chunk (position + 1 is a multiple of chunk_tokens)
  Flush = 2,     ///< a partial chunk written on request (e.g. before the process stops)
};

struct Frame {
  FrameKind kind = FrameKind::Boundary;
  uint64_t position = 0;     ///< absolute position of the encoded residual (the chunk's last token)
  uint64_t token_start = 0;  ///< absolute position of tokens[0]
  std::vector<int32_t> tokens;  ///< the chunk's token ids (positions token_start .. position)
  Codec codec = Codec::Bf16;
  float log_prob_margin = 0;  ///< nats, top-1 minus top-2 log-probability at `position`
  float top1_prob = 0;        ///< probability of the top-1 next token at `position`
  int32_t top1_token = -1;
  std::vector<uint8_t> payload;  ///< encode(codec, residual, hidden)
};

struct ArchiveHeader {
  std::string fingerprint;  ///< the model's fingerprint (Model::fingerprint())
  std::string sequence_id;
  uint64_t uid = 0;     ///< random at creation: ties a saved engine state to this very archive
  uint32_t hidden = 0;  ///< residual width; every payload is payload_bytes(codec, hidden)
};

struct Archive {
  ArchiveHeader header;
  std::vector<Frame> frames;
  /// Every token id of the archived sequence, in order (the frames' tokens concatenated).
  std::vector<int32_t> tokens() const;
};

/// Write `a` as the archive at `path` (replacing it atomically); creates parent directories.
/// Error{Io} on failure; Error{InvalidArgument} for frames whose position/tokens disagree or
/// that are not contiguous from position 0.
void archive_write(const std::string& path, const Archive& a);
/// Create (or replace) the archive at `path` with `h` and no frames.
void archive_create(const std::string& path, const ArchiveHeader& h);
/// Append one frame: the archive is read, validated, extended and written back atomically. A
/// frame the archive already holds byte for byte (a resumed copy of the sequence writing what the
/// original wrote) is a no-op. Errors: those of archive_read() and archive_write();
/// Error{InvariantViolation} for a different frame at a position the archive already covers.
void archive_append(const std::string& path, const Frame& f);
/// Read and validate a whole archive. Error{NotFound} (no file), Error{Format} naming the byte
/// offset for bad magic/version, a checksum mismatch (damage anywhere), a truncated header or
/// frame, a payload of the wrong length, or frames that are not contiguous.
Archive archive_read(const std::string& path);

}  // namespace larql::boundary
