#include "coordinator/wire/curve_keys.h"

#include <zmq.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <fstream>
#include <sstream>
#include <sys/stat.h>
#include <unistd.h>

namespace moezip {

namespace {

constexpr size_t kZ85KeyChars = 40;

std::string trim(const std::string & s) {
    const size_t a = s.find_first_not_of(" \t\r");
    if (a == std::string::npos) return "";
    const size_t b = s.find_last_not_of(" \t\r");
    return s.substr(a, b - a + 1);
}

// `name = "value"` -> value when the line's key is `name`; "" otherwise.
bool key_value(const std::string & line, const char * name, std::string & value) {
    const size_t n = strlen(name);
    if (line.compare(0, n, name) != 0) return false;
    std::string rest = trim(line.substr(n));
    if (rest.empty() || rest[0] != '=') return false;
    rest = trim(rest.substr(1));
    if (rest.size() < 2 || rest.front() != '"' || rest.back() != '"') return false;
    value = rest.substr(1, rest.size() - 2);
    return true;
}

// A key file is a small regular file: a FIFO would block the host forever and a device could feed
// it without end, so anything else is refused before it is read, and at most 1 MiB + 1 byte is read.
Status read_text(const std::string & path, std::string & text) {
    constexpr size_t kMax = 1 << 20;
    const int fd = open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return Status::io_error("cannot read key file " + path + ": " + strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        close(fd);
        return Status::invalid_argument("key file " + path + " is not a regular file");
    }
    text.assign(kMax + 1, '\0');
    size_t got = 0;
    while (got < text.size()) {
        const ssize_t n = read(fd, &text[got], text.size() - got);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) {
            const int e = errno;
            close(fd);
            return Status::io_error("cannot read key file " + path + ": " + strerror(e));
        }
        if (n == 0) break;
        got += (size_t) n;
    }
    close(fd);
    text.resize(got);
    if (got > kMax) return Status::io_error("key file " + path + " is larger than 1 MiB");
    return Status::ok();
}

// Creates `path` with `mode`, failing when it exists; writes `text`.
Status write_new(const std::string & path, const std::string & text, mode_t mode) {
    const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
    if (fd < 0)
        return Status::io_error("cannot create " + path + ": " + strerror(errno) + (errno == EEXIST ? " (keys are never overwritten)" : ""));
    const bool ok = write(fd, text.data(), text.size()) == (ssize_t) text.size();
    const bool closed = close(fd) == 0;
    if (!ok || !closed) return Status::io_error("cannot write " + path + ": " + strerror(errno));
    return Status::ok();
}

} // namespace

bool curve_available() { return zmq_has("curve") != 0; }

bool curve_key_valid(const std::string & z85) {
    if (z85.size() != kZ85KeyChars) return false;
    uint8_t bytes[32];
    return zmq_z85_decode(bytes, z85.c_str()) != nullptr;
}

Status curve_keypair_new(CurveKeyPair & out) {
    char pub[41], sec[41];
    if (!curve_available() || zmq_curve_keypair(pub, sec) != 0)
        return Status::unsupported("this libzmq has no CURVE support (zmq_has(\"curve\") is false)");
    out.public_key = pub;
    out.secret_key = sec;
    memset(sec, 0, sizeof sec);
    return Status::ok();
}

Status curve_keygen_write(const std::string & dir, CurveKeyPair & pair, std::string & key_path, std::string & pub_path) {
    for (size_t at = dir.find('/', 1); ; at = dir.find('/', at + 1)) {  // missing parents too, as mkdir -p
        const std::string part = dir.substr(0, at);
        if (!part.empty() && mkdir(part.c_str(), 0700) != 0 && errno != EEXIST)
            return Status::io_error("cannot create " + part + ": " + strerror(errno));
        if (at == std::string::npos) break;
    }
    key_path = dir + "/moezip.key";
    pub_path = dir + "/moezip.pub";
    if (access(key_path.c_str(), F_OK) == 0 || access(pub_path.c_str(), F_OK) == 0)
        return Status::io_error((access(key_path.c_str(), F_OK) == 0 ? key_path : pub_path) + " exists (keys are never overwritten)");
    Status st = curve_keypair_new(pair);
    if (!st) return st;
    st = write_new(key_path, "# moezip CURVE key pair (Z85). Keep this file private: whoever holds it is this host.\n"
                             "public-key = \"" + pair.public_key + "\"\nsecret-key = \"" + pair.secret_key + "\"\n", 0600);
    if (!st) return st;
    return write_new(pub_path, "# moezip CURVE public key (Z85): give it to the peers that must accept this host.\n"
                               "public-key = \"" + pair.public_key + "\"\n", 0644);
}

Status curve_keypair_read(const std::string & path, CurveKeyPair & out) {
    struct stat sb;
    if (stat(path.c_str(), &sb) != 0) return Status::io_error("cannot read key file " + path + ": " + strerror(errno));
    if (!S_ISREG(sb.st_mode)) return Status::invalid_argument("key file " + path + " is not a regular file");
    if (sb.st_mode & 077) {
        char mode[8];
        snprintf(mode, sizeof mode, "%03o", (unsigned) (sb.st_mode & 0777));
        return Status::invalid_argument("key file " + path + " may be read by group or others (mode " + mode + "): chmod 600 it");
    }
    std::string text;
    Status st = read_text(path, text);
    if (!st) return st;
    std::istringstream lines(text);
    std::string line, pub, sec;
    while (std::getline(lines, line)) {
        line = trim(line);
        std::string v;
        if (key_value(line, "public-key", v)) pub = v;
        else if (key_value(line, "secret-key", v)) sec = v;
    }
    if (!curve_key_valid(sec)) return Status::invalid_argument("key file " + path + ": no valid secret-key = \"<40 Z85 characters>\" line");
    char derived[41];
    if (zmq_curve_public(derived, sec.c_str()) != 0) return Status::unsupported("this libzmq has no CURVE support");
    if (!pub.empty() && pub != derived)
        return Status::invalid_argument("key file " + path + ": its public-key does not belong to its secret-key");
    out.public_key = derived;
    out.secret_key = sec;
    return Status::ok();
}

Status curve_public_keys_read(const std::string & path, std::vector<std::string> & out) {
    std::string text;
    Status st = read_text(path, text);
    if (!st) return st;
    std::istringstream lines(text);
    std::string line;
    size_t found = 0;
    for (int n = 1; std::getline(lines, line); ++n) {
        line = trim(line);
        if (line.empty() || line[0] == '#') continue;
        std::string v = line;
        if (key_value(line, "secret-key", v))
            return Status::invalid_argument(path + ":" + std::to_string(n) + ": a secret key in a public-key file (give the .pub file)");
        if (!key_value(line, "public-key", v)) v = line;
        if (!curve_key_valid(v))
            return Status::invalid_argument(path + ":" + std::to_string(n) + ": expected public-key = \"<40 Z85 characters>\" or a bare key");
        out.push_back(v);
        ++found;
    }
    if (found == 0) return Status::invalid_argument(path + ": no public key in the file");
    return Status::ok();
}

} // namespace moezip
