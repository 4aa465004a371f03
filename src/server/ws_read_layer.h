// The stream layer under /v1/stream's Beast WebSocket (server/http.cc): it owns the read buffer
// that poll(2) cannot see, and it hands the WebSocket at most one frame per read.
//
// Why: while a call runs, the server polls the socket for a `cancel` or a new call. Beast reads
// as many bytes as the socket holds, so two frames that arrive in one TCP read (a generate and its
// cancel sent at once) would leave the second in Beast's private buffer, where neither poll(2) nor
// the server can see it. Under this layer, Beast never receives bytes past the end of the frame
// it is reading (RFC 6455 §5.2 gives each frame's length in its header), so once a message is
// read, whatever came after it lies here, in buffered(), and ready() says so without a wait.
//
// Stream: tcp::socket or ssl::stream<tcp::socket> (its lowest layer is the tcp::socket). Sync
// reads and writes only: the server drives each connection from its own thread.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <boost/asio/buffer.hpp>
#include <boost/asio/error.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/stream_traits.hpp>
#include <boost/beast/core/role.hpp>
#include <boost/beast/websocket/teardown.hpp>
#include <boost/system/error_code.hpp>
#include <boost/system/system_error.hpp>

namespace larql::server {

/// RFC 6455 §5.2: the length in bytes of the frame whose first bytes are `head` (header, masking
/// key and payload), or 0 when `n` bytes are too few to say; saturates at UINT64_MAX.
inline uint64_t ws_frame_length(const unsigned char* head, size_t n) {
  if (n < 2) return 0;
  const unsigned len7 = head[1] & 0x7f;
  const size_t ext = len7 == 126 ? 2 : len7 == 127 ? 8 : 0;
  const size_t header = 2 + ext + ((head[1] & 0x80) ? 4 : 0);
  if (n < header) return 0;
  uint64_t payload = len7;
  if (ext) {
    payload = 0;
    for (size_t i = 0; i < ext; ++i) payload = (payload << 8) | head[2 + i];
  }
  return payload > UINT64_MAX - header ? UINT64_MAX : header + payload;
}

template <class Stream>
class WsReadLayer {
 public:
  using next_layer_type = Stream;
  using executor_type = typename Stream::executor_type;

  /// `already_read`: bytes read past the HTTP upgrade request (frames a client sent at once).
  WsReadLayer(Stream& next, std::string already_read) : next_(next) {
    auto b = buf_.prepare(already_read.size());
    boost::asio::buffer_copy(b, boost::asio::buffer(already_read));
    buf_.commit(already_read.size());
  }

  Stream& next_layer() { return next_; }
  executor_type get_executor() { return next_.get_executor(); }

  /// Bytes read from the socket that the WebSocket has not taken yet.
  size_t buffered() const { return buf_.size(); }

  /// True when bytes of a next frame (or the socket's end) are already here — then a read will
  /// not wait on the socket for its first byte. Otherwise reads what the socket holds without
  /// blocking (a TLS stream's decrypted bytes included, which poll(2) does not see either) and
  /// says whether that gave any.
  bool ready() {
    if (buf_.size() > 0 || pending_) return true;
    auto& raw = boost::beast::get_lowest_layer(next_);
    boost::system::error_code ec, ignored;
    raw.non_blocking(true, ignored);
    const size_t n = next_.read_some(buf_.prepare(kChunk), ec);
    raw.non_blocking(false, ignored);
    if (ec == boost::asio::error::would_block || ec == boost::asio::error::try_again) return false;
    if (ec) {
      pending_ = ec;  // the next read reports it
      return true;
    }
    buf_.commit(n);
    return n > 0;
  }

  template <class MutableBuffers>
  size_t read_some(const MutableBuffers& out, boost::system::error_code& ec) {
    ec = {};
    const size_t want = boost::asio::buffer_size(out);
    if (want == 0) return 0;
    if (left_ == 0) {  // at a frame's start: read its header to learn its length
      uint64_t len = 0;
      while ((len = ws_frame_length(static_cast<const unsigned char*>(buf_.data().data()), buf_.size())) == 0)
        if (!fill(ec)) return 0;
      left_ = len;
    }
    if (buf_.size() == 0 && !fill(ec)) return 0;
    const size_t n = static_cast<size_t>(std::min<uint64_t>({want, left_, buf_.size()}));
    boost::asio::buffer_copy(out, buf_.data(), n);
    buf_.consume(n);
    left_ -= n;
    return n;
  }
  template <class MutableBuffers>
  size_t read_some(const MutableBuffers& out) {
    boost::system::error_code ec;
    const size_t n = read_some(out, ec);
    if (ec) throw boost::system::system_error(ec);
    return n;
  }
  template <class ConstBuffers>
  size_t write_some(const ConstBuffers& in, boost::system::error_code& ec) {
    return next_.write_some(in, ec);
  }
  template <class ConstBuffers>
  size_t write_some(const ConstBuffers& in) {
    return next_.write_some(in);
  }

 private:
  static constexpr size_t kChunk = 16 * 1024;
  /// One read of the socket (blocking) into buf_; false with `ec` set when it fails.
  bool fill(boost::system::error_code& ec) {
    if (pending_) {
      ec = pending_;
      pending_ = {};
      return false;
    }
    const size_t n = next_.read_some(buf_.prepare(kChunk), ec);
    buf_.commit(n);
    return !ec;
  }

  Stream& next_;
  boost::beast::flat_buffer buf_;
  uint64_t left_ = 0;  ///< bytes of the current frame the WebSocket has not taken yet
  boost::system::error_code pending_;
};

/// Closing the WebSocket closes the stream under the layer (found by argument-dependent lookup).
template <class Stream>
void teardown(boost::beast::role_type role, WsReadLayer<Stream>& layer, boost::system::error_code& ec) {
  using boost::beast::websocket::teardown;
  teardown(role, layer.next_layer(), ec);
}

}  // namespace larql::server
