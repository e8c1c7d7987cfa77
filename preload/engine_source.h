// moezip: the source a loaded engine names for itself, besides ggml_commit().
//
// node-llama-cpp's prebuilt binaries report the commit of the repository that built them (3.21.1:
// "5b4ebc5"), not of the llama.cpp source they were built from. The npm package ships that source
// beside them as a git bundle (node_modules/node-llama-cpp/llama/gitRelease.bundle, one commit,
// "# v2 git bundle\n<sha> HEAD\n..."), so the binaries' source can be read from where they are
// installed, whoever built them.
#pragma once

#include <string>

namespace moezip {

/// For a library inside a node-llama-cpp install
/// (<root>/node_modules/@node-llama-cpp/<platform>/bins/<platform>/lib...so): the full commit of the
/// source bundle of <root>/node_modules/node-llama-cpp, when that package and the binaries' package
/// have the same version. "" for any other library, an unreadable bundle or differing versions.
std::string engine_npm_source_commit(const std::string & lib_path);

/// The commit the header of a git bundle file names for HEAD (or its first ref); "" when the file is
/// not a v2/v3 git bundle.
std::string git_bundle_head(const std::string & bundle_path);

} // namespace moezip
