#include "preload/engine_source.h"

#include <cstdio>
#include <cstring>

namespace moezip {

namespace {

// The first bytes of a small file ("" when unreadable).
std::string read_head(const std::string & path, size_t max_bytes) {
    FILE * f = fopen(path.c_str(), "rb");
    if (f == nullptr) return "";
    std::string s(max_bytes, '\0');
    s.resize(fread(&s[0], 1, max_bytes, f));
    fclose(f);
    return s;
}

bool is_sha1_hex(const std::string & s) {
    if (s.size() != 40) return false;
    for (char c : s)
        if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
    return true;
}

// The "version" of a package.json ("" when none).
std::string package_version(const std::string & package_json) {
    const std::string text = read_head(package_json, 1 << 16);
    size_t k = text.find("\"version\"");
    if (k == std::string::npos) return "";
    size_t a = text.find('"', text.find(':', k) + 1);
    size_t b = a == std::string::npos ? a : text.find('"', a + 1);
    return b == std::string::npos ? "" : text.substr(a + 1, b - a - 1);
}

} // namespace

std::string git_bundle_head(const std::string & bundle_path) {
    const std::string head = read_head(bundle_path, 4096);
    if (head.rfind("# v2 git bundle\n", 0) != 0 && head.rfind("# v3 git bundle\n", 0) != 0) return "";
    std::string first;
    size_t at = head.find('\n') + 1;
    while (at < head.size()) {
        size_t nl = head.find('\n', at);
        if (nl == std::string::npos || nl == at) break;  // a blank line ends the header
        const std::string line = head.substr(at, nl - at);
        at = nl + 1;
        if (line[0] == '@' || line[0] == '-') continue;   // v3 capabilities, prerequisites
        const std::string sha = line.substr(0, 40);
        if (!is_sha1_hex(sha)) continue;
        if (line.size() > 41 && line.compare(41, std::string::npos, "HEAD") == 0) return sha;
        if (first.empty()) first = sha;
    }
    return first;
}

std::string engine_npm_source_commit(const std::string & lib_path) {
    static const char marker[] = "/node_modules/@node-llama-cpp/";
    const size_t at = lib_path.find(marker);
    if (at == std::string::npos) return "";
    const std::string modules = lib_path.substr(0, at) + "/node_modules";
    const size_t platform_end = lib_path.find('/', at + sizeof marker - 1);
    if (platform_end == std::string::npos) return "";
    const std::string bins_package = lib_path.substr(0, platform_end);  // .../@node-llama-cpp/linux-x64
    const std::string version = package_version(modules + "/node-llama-cpp/package.json");
    if (version.empty() || version != package_version(bins_package + "/package.json")) return "";
    return git_bundle_head(modules + "/node-llama-cpp/llama/gitRelease.bundle");
}

} // namespace moezip
