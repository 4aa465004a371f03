// TLS material for the shard service (docs/sharding.md "Security"), read from PEM files and checked
// before gRPC sees it: gRPC's own errors for a wrong file come late (at the first handshake) and
// name no file, so a key that is not its certificate's, or a CA file that holds no certificate,
// is refused here at start, naming the file.
#pragma once

#include <string>

namespace larql::shard::tls {

/// The PEM text of `path`, which must hold at least one certificate, each of which parses.
/// `what` names the file's role in messages ("the client CA"). Errors: Error{NotFound} when the
/// file cannot be read; Error{InvalidArgument} when it holds no PEM certificate or one that does
/// not parse.
std::string read_certificates(const std::string& path, const char* what);

/// The PEM text of `path`, which must hold an unencrypted private key. Errors: Error{NotFound}
/// when the file cannot be read; Error{InvalidArgument} when it holds no key that parses (or an
/// encrypted one: no passphrase is asked for).
std::string read_private_key(const std::string& path, const char* what);

/// Error{InvalidArgument} naming both files unless `key_pem` is the private key of the first
/// certificate of `cert_pem`.
void check_key_pair(const std::string& cert_pem, const std::string& key_pem, const std::string& cert_path,
                    const std::string& key_path);

}  // namespace larql::shard::tls
