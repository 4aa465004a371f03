#include "shard/tls.h"

#include <fstream>
#include <memory>
#include <sstream>

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include "util/error.h"

namespace larql::shard::tls {
namespace {

std::string read_file(const std::string& path, const char* what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(ErrorKind::NotFound, std::string(what) + " " + path + ": cannot be read");
  std::stringstream ss;
  ss << in.rdbuf();
  if (!in.good() && !in.eof()) throw Error(ErrorKind::Io, std::string(what) + " " + path + ": read failed");
  return ss.str();
}

struct BioFree {
  void operator()(BIO* b) const { BIO_free(b); }
};
struct X509Free {
  void operator()(X509* x) const { X509_free(x); }
};
struct KeyFree {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};
using Bio = std::unique_ptr<BIO, BioFree>;

Bio bio_of(const std::string& pem) { return Bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size()))); }

/// No passphrase: an encrypted key fails to load instead of prompting on the terminal.
int no_password(char*, int, int, void*) { return 0; }

std::unique_ptr<X509, X509Free> first_certificate(const std::string& pem) {
  Bio b = bio_of(pem);
  return std::unique_ptr<X509, X509Free>(PEM_read_bio_X509(b.get(), nullptr, nullptr, nullptr));
}

}  // namespace

std::string read_certificates(const std::string& path, const char* what) {
  const std::string pem = read_file(path, what);
  if (pem.find("-----BEGIN CERTIFICATE-----") == std::string::npos)
    throw Error(ErrorKind::InvalidArgument, std::string(what) + " " + path + ": holds no PEM certificate");
  Bio b = bio_of(pem);
  int n = 0;
  while (X509* x = PEM_read_bio_X509(b.get(), nullptr, nullptr, nullptr)) {
    X509_free(x);
    ++n;
  }
  ERR_clear_error();  // the loop ends on "no start line"
  const size_t blocks = [&] {
    size_t c = 0;
    for (size_t at = pem.find("-----BEGIN CERTIFICATE-----"); at != std::string::npos;
         at = pem.find("-----BEGIN CERTIFICATE-----", at + 1))
      ++c;
    return c;
  }();
  if (n == 0 || static_cast<size_t>(n) != blocks)
    throw Error(ErrorKind::InvalidArgument, std::string(what) + " " + path + ": certificate " + std::to_string(n + 1) +
                                                " of " + std::to_string(blocks) + " does not parse");
  return pem;
}

std::string read_private_key(const std::string& path, const char* what) {
  const std::string pem = read_file(path, what);
  Bio b = bio_of(pem);
  std::unique_ptr<EVP_PKEY, KeyFree> k(PEM_read_bio_PrivateKey(b.get(), nullptr, no_password, nullptr));
  ERR_clear_error();
  if (!k)
    throw Error(ErrorKind::InvalidArgument, std::string(what) + " " + path +
                                                ": holds no PEM private key that can be read (an encrypted key is "
                                                "not supported: no passphrase is asked for)");
  return pem;
}

void check_key_pair(const std::string& cert_pem, const std::string& key_pem, const std::string& cert_path,
                    const std::string& key_path) {
  auto cert = first_certificate(cert_pem);
  Bio b = bio_of(key_pem);
  std::unique_ptr<EVP_PKEY, KeyFree> k(PEM_read_bio_PrivateKey(b.get(), nullptr, no_password, nullptr));
  const bool ok = cert && k && X509_check_private_key(cert.get(), k.get()) == 1;
  ERR_clear_error();
  if (!ok)
    throw Error(ErrorKind::InvalidArgument, "the key " + key_path + " is not the private key of the certificate " +
                                                cert_path + " (give the key the certificate was issued for)");
}

}  // namespace larql::shard::tls
