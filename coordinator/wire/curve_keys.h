// moezip: CurveZMQ key pairs and key files (libzmq's built-in CURVE; docs/security.md).
//
// A host (worker or coordinator) has one key pair, made by `moezip-worker --keygen DIR`:
//   DIR/moezip.key   this host's key pair, mode 0600 (keep private: whoever holds it is this host)
//       # comment lines
//       public-key = "<40 Z85 characters>"
//       secret-key = "<40 Z85 characters>"
//   DIR/moezip.pub   the public key only, to give to the peers that must accept this host
//       public-key = "<40 Z85 characters>"
// A public-key file may hold several keys (one `public-key = "..."` line or one bare Z85 key per
// line): a worker's allow-list of coordinators is such a file. Keys are the Z85 text libzmq takes
// (zmq_curve_keypair, ZMQ_CURVE_*KEY): 40 characters for 32 bytes.
// Secret keys are read only here and handed to libzmq; nothing logs or reports them.
#pragma once

#include "provider_map/status.h"

#include <string>
#include <vector>

namespace moezip {

/// One CURVE key pair in Z85 text (40 characters each; the secret may be empty for a public key).
struct CurveKeyPair {
    std::string public_key;
    std::string secret_key;
};

/// True when this libzmq was built with CURVE (zmq_has("curve")).
bool curve_available();

/// True when `z85` is 40 characters that decode to 32 bytes.
bool curve_key_valid(const std::string & z85);

/// A new key pair (zmq_curve_keypair). Errors: unsupported without CURVE.
Status curve_keypair_new(CurveKeyPair & out);

/// Writes <dir>/moezip.key (mode 0600) and <dir>/moezip.pub; creates dir and its missing parents
/// (mode 0700) first.
/// Never overwrites: errors (io_error) name the file that exists or cannot be written.
/// `key_path`/`pub_path` get the paths written.
Status curve_keygen_write(const std::string & dir, CurveKeyPair & pair, std::string & key_path, std::string & pub_path);

/// Reads a key-pair file: secret-key required, public-key checked against it when present (else
/// derived). Refuses a file that group or others may read (as ssh does). Errors name the file.
Status curve_keypair_read(const std::string & path, CurveKeyPair & out);

/// Reads every public key of a public-key file (allow-list), appending to `out`. Errors name the
/// file and line (a line that is neither a comment, `public-key = "..."` nor a bare Z85 key; a
/// file without any key).
Status curve_public_keys_read(const std::string & path, std::vector<std::string> & out);

} // namespace moezip
