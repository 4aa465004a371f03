#include "util/atomic_file.h"

#include <gtest/gtest.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "util/error.h"

namespace fs = std::filesystem;

namespace larql {
namespace {

class AtomicWriterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("larql-atomic-" + std::to_string(::getpid()) + "-" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    clear_inputs();
  }
  void TearDown() override {
    clear_inputs();
    fs::remove_all(dir_);
  }
  static std::string slurp(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }
  static void spit(const fs::path& p, const std::string& s) { std::ofstream(p, std::ios::binary) << s; }
  size_t entries() const { return static_cast<size_t>(std::distance(fs::directory_iterator(dir_), {})); }
  fs::path dir_;
};

TEST_F(AtomicWriterTest, CommitReplacesAndLeavesNoTemporary) {
  const fs::path f = dir_ / "out.bin";
  spit(f, "old contents");
  {
    AtomicWriter w(f.string());
    w.write("new ");
    std::string big(3 << 20, 'x');  // larger than the buffer: written straight through
    w.write(big);
    EXPECT_EQ(slurp(f), "old contents");  // nothing visible before commit
    w.commit();
  }
  EXPECT_EQ(slurp(f).size(), 4u + (3u << 20));
  EXPECT_EQ(entries(), 1u);
}

TEST_F(AtomicWriterTest, NoCommitKeepsTheOldFileAndRemovesTheTemporary) {
  const fs::path f = dir_ / "keep.txt";
  spit(f, "precious");
  {
    AtomicWriter w(f.string());
    w.write("half-written");
  }  // an exception path: destroyed without commit
  EXPECT_EQ(slurp(f), "precious");
  EXPECT_EQ(entries(), 1u);
}

TEST_F(AtomicWriterTest, TheNextWriterRemovesAKilledWritersTemporaryButNotALiveOnes) {
  const fs::path f = dir_ / "model.gguf";
  // A killed writer's temporary: nobody holds its lock. A live writer's: locked (flock is per open
  // file, so this process's lock conflicts with the writer's own probe as another process's would).
  spit(dir_ / ".model.gguf.tmp-dead01", "torn");
  spit(dir_ / ".model.gguf.tmp-live01", "being written");
  spit(dir_ / ".other.gguf.tmp-dead02", "another target's");
  const int fd = ::open((dir_ / ".model.gguf.tmp-live01").c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::flock(fd, LOCK_EX | LOCK_NB), 0);
  write_file_atomic(f.string(), "new");
  EXPECT_EQ(slurp(f), "new");
  EXPECT_FALSE(fs::exists(dir_ / ".model.gguf.tmp-dead01"));
  EXPECT_TRUE(fs::exists(dir_ / ".model.gguf.tmp-live01"));
  EXPECT_TRUE(fs::exists(dir_ / ".other.gguf.tmp-dead02"));
  ::close(fd);
  EXPECT_EQ(remove_stale_temps(f.string()), 1u);  // unlocked now
  EXPECT_EQ(entries(), 2u);
}

TEST_F(AtomicWriterTest, RefusesARegisteredInputByIdentityNotName) {
  const fs::path model = dir_ / "model.gguf";
  spit(model, "weights");
  register_input(model.string(), "the model");
  const fs::path link = dir_ / "hard-link";
  fs::create_hard_link(model, link);
  const fs::path sym = dir_ / "sym-link";
  fs::create_symlink(model, sym);
  for (const fs::path& p : {model, link, sym, dir_ / "." / "model.gguf"}) {
    try {
      AtomicWriter w(p.string(), "--logits-out");
      FAIL() << p << " accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument);
      EXPECT_NE(std::string(e.what()).find("the model"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("--logits-out"), std::string::npos) << e.what();
    }
  }
  EXPECT_EQ(slurp(model), "weights");
  EXPECT_EQ(input_role(link.string()), "the model");
}

TEST_F(AtomicWriterTest, ADeletedInputsInodeIsNotReusedByANewFile) {
  // Found by running the engine contract tests in one process: a calibration record registered
  // as input, then deleted, left its device + inode in the registry, and a new archive file that
  // got the same inode was refused as "the calibration record". A registered input is held open,
  // so its inode stays allocated; every new file here must be free to write.
  for (int i = 0; i < 20; ++i) {
    const fs::path in = dir_ / ("record-" + std::to_string(i) + ".json");
    spit(in, "record");
    register_input(in.string(), "the calibration record");
    fs::remove(in);
    const fs::path out = dir_ / ("archive-" + std::to_string(i));
    spit(out, "frames");
    EXPECT_EQ(input_role(out.string()), "") << out;
    AtomicWriter w(out.string(), "archive");
    w.write("x", 1);
    w.commit();
  }
}

TEST_F(AtomicWriterTest, SymlinkTargetIsReplacedAndTheLinkKept) {
  const fs::path real = dir_ / "real.json", sym = dir_ / "alias.json";
  spit(real, "{}");
  fs::create_symlink(real, sym);
  write_file_atomic(sym.string(), "{\"a\":1}");
  EXPECT_TRUE(fs::is_symlink(sym));
  EXPECT_EQ(slurp(real), "{\"a\":1}");
}

TEST_F(AtomicWriterTest, ClearErrorsForDirectoriesMissingParentsAndReadOnlyDirs) {
  try {
    AtomicWriter w(dir_.string(), "--save-state");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("is a directory"), std::string::npos);
  }
  try {
    check_output_path((dir_ / "no" / "such" / "x.kv").string(), "--save-state");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::NotFound);
    EXPECT_NE(std::string(e.what()).find("does not exist"), std::string::npos);
  }
  if (::geteuid() != 0) {  // root ignores directory permissions
    const fs::path ro = dir_ / "ro";
    fs::create_directory(ro);
    fs::permissions(ro, fs::perms::owner_read | fs::perms::owner_exec);
    try {
      check_output_path((ro / "x").string(), "--save-state");
      FAIL();
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("Permission denied"), std::string::npos) << e.what();
    }
    fs::permissions(ro, fs::perms::owner_all);
  }
}

TEST_F(AtomicWriterTest, DevicesAreWrittenDirectly) {
  AtomicWriter w("/dev/null");
  w.write("ignored");
  w.commit();
  EXPECT_EQ(entries(), 0u);
}

TEST_F(AtomicWriterTest, FullDiskIsAnErrorAndTheOldFileSurvives) {
  // /dev/full fails every write with ENOSPC; a writer onto it must report the OS reason.
  if (!fs::exists("/dev/full")) GTEST_SKIP() << "no /dev/full";
  try {
    AtomicWriter w("/dev/full");
    w.write(std::string(2 << 20, 'x'));
    w.commit();
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Io);
    EXPECT_NE(std::string(e.what()).find("No space left"), std::string::npos) << e.what();
  }
}

TEST_F(AtomicWriterTest, NewFileGetsTheUmaskModeAndExistingKeepsItsMode) {
  const fs::path f = dir_ / "mode.txt";
  write_file_atomic(f.string(), "a");
  struct stat st {};
  ASSERT_EQ(::stat(f.c_str(), &st), 0);
  const mode_t mask = ::umask(0);
  ::umask(mask);
  EXPECT_EQ(st.st_mode & 0777, 0666 & ~mask);
  ::chmod(f.c_str(), 0600);
  write_file_atomic(f.string(), "b");
  ASSERT_EQ(::stat(f.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
}

}  // namespace
}  // namespace larql
