"""The JVM class-data archive's pure parts (jobs/jvm_archive.py): the class path Spark's launcher builds, the key
and its staleness, the use / build / go-without decision. No JVM is launched here (tests/spark/test_jvm_archive.py
launches one)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from jobs.jvm_archive import (
    ArchiveKey,
    archive_dir,
    check_mapped,
    class_path_files,
    decide,
    enabled,
    java_binary,
    launcher_class_path,
    prune,
    remove_leftovers,
)


def _spark_home(tmp_path: Path) -> Path:
    home = tmp_path / "pyspark"
    (home / "jars").mkdir(parents=True)
    for name in ("spark-core_2.13-4.3.0.jar", "slf4j-api-2.0.17.jar", "zstd-jni-1.5.jar"):
        (home / "jars" / name).write_bytes(name.encode())
    return home


def _key(home: Path, java: str = "openjdk version \"17.0.15\"", pyspark: str = "4.3.0") -> ArchiveKey:
    class_path = launcher_class_path(home, {})
    assert class_path is not None
    return ArchiveKey(class_path, tuple(class_path_files(class_path)), java, pyspark)


def test_the_class_path_is_the_launchers_conf_dir_slf4j_first_then_every_jar(tmp_path: Path) -> None:
    home = _spark_home(tmp_path)
    jars = home / "jars"
    assert launcher_class_path(home, {}) == f"{home}/conf:{jars}/slf4j-api-2.0.17.jar:{jars}/*"
    env = {"SPARK_CONF_DIR": "/etc/spark", "HADOOP_CONF_DIR": "/etc/hadoop", "SPARK_DIST_CLASSPATH": "/x.jar"}
    assert launcher_class_path(home, env, "/extra.jar") == (
        f"/extra.jar:/etc/spark:{jars}/slf4j-api-2.0.17.jar:{jars}/*:/etc/hadoop:/x.jar")


@pytest.mark.parametrize("env", [{"SPARK_PREPEND_CLASSES": "1"}, {"SPARK_TESTING": "1"}])
def test_the_launchers_developer_modes_are_not_predicted(tmp_path: Path, env: dict[str, str]) -> None:
    assert launcher_class_path(_spark_home(tmp_path), env) is None


def test_a_spark_home_without_jars_has_no_class_path(tmp_path: Path) -> None:
    assert launcher_class_path(tmp_path, {}) is None


def test_the_key_covers_every_jar_behind_the_wildcard(tmp_path: Path) -> None:
    home = _spark_home(tmp_path)
    files = [Path(path).name for path, _size, _mtime in _key(home).files]
    # slf4j named first, then the wildcard's jars (slf4j again: the JVM opens what the class path names)
    assert files == ["slf4j-api-2.0.17.jar", "slf4j-api-2.0.17.jar", "spark-core_2.13-4.3.0.jar",
                     "zstd-jni-1.5.jar"]


def test_the_key_is_stable_and_goes_stale_with_a_jar_java_or_pyspark(tmp_path: Path) -> None:
    home = _spark_home(tmp_path)
    first = _key(home)
    assert _key(home).digest == first.digest
    assert _key(home, java="openjdk version \"17.0.16\"").digest != first.digest
    assert _key(home, pyspark="4.3.1").digest != first.digest
    jar = home / "jars" / "zstd-jni-1.5.jar"
    os.utime(jar, ns=(1, 1))
    assert _key(home).digest != first.digest  # the JVM refuses a jar whose mtime changed
    (home / "jars" / "new-2.0.jar").write_bytes(b"x")
    assert len(_key(home).files) == len(first.files) + 1


def test_an_existing_archive_is_used(tmp_path: Path) -> None:
    key = _key(_spark_home(tmp_path))
    archives = tmp_path / "cache"
    archives.mkdir()
    (archives / f"{key.digest}.jsa").write_bytes(b"archive")
    decision = decide(archives, key, "")
    assert not decision.build and decision.note == ""
    assert f"-XX:SharedArchiveFile={archives}/{key.digest}.jsa" in decision.options
    assert "-Xshare:auto" in decision.options  # a JVM that cannot map it still starts


def test_a_missing_archive_is_built_when_the_directory_is_writable(tmp_path: Path) -> None:
    key = _key(_spark_home(tmp_path))
    decision = decide(tmp_path / "not" / "yet" / "there", key, "")
    assert decision.build and decision.options == ""
    assert "building one in the background" in decision.note


def test_an_unwritable_directory_means_no_archive_in_one_line(tmp_path: Path) -> None:
    key = _key(_spark_home(tmp_path))
    decision = decide(tmp_path / "cache", key, "", writable=lambda d: False)
    assert (decision.options, decision.build) == ("", False)
    assert decision.note == f"JVM class-data archive not used: {tmp_path / 'cache'} is not writable"


def test_a_refused_key_is_not_retried_and_says_why(tmp_path: Path) -> None:
    key = _key(_spark_home(tmp_path))
    (tmp_path / f"{key.digest}.refused").write_text("the JVM refuses the archive it dumped: mismatch\n")
    (tmp_path / f"{key.digest}.jsa").write_bytes(b"archive")  # a refusal wins over a file
    decision = decide(tmp_path, key, "")
    assert (decision.options, decision.build) == ("", False)
    assert decision.note.startswith("JVM class-data archive not used: the JVM refuses the archive it dumped")
    assert "\n" not in decision.note


def test_no_java_means_no_archive_in_one_line(tmp_path: Path) -> None:
    assert java_binary({"PATH": str(tmp_path)}) is None
    assert java_binary({"JAVA_HOME": str(tmp_path), "PATH": ""}) is None
    decision = decide(tmp_path, None, "no java (JAVA_HOME/bin/java or java on PATH)")
    assert decision == decide(tmp_path, None, "no java (JAVA_HOME/bin/java or java on PATH)")
    assert (decision.options, decision.build) == ("", False)
    assert decision.note == "JVM class-data archive not used: no java (JAVA_HOME/bin/java or java on PATH)"


def test_the_directory_and_the_switch_come_from_the_environment(tmp_path: Path) -> None:
    assert archive_dir({"RMQ_JVM_ARCHIVE_DIR": str(tmp_path)}) == tmp_path
    assert archive_dir({"XDG_CACHE_HOME": "/c"}) == Path("/c/rocketmq-replicator/jvm-archive")
    assert archive_dir({"HOME": "/h"}) == Path("/h/.cache/rocketmq-replicator/jvm-archive")
    assert enabled({}) and enabled({"RMQ_JVM_ARCHIVE": "on"})
    assert not enabled({"RMQ_JVM_ARCHIVE": "off"}) and not enabled({"RMQ_JVM_ARCHIVE": "0"})


def test_a_jvm_that_did_not_map_the_archive_is_one_line() -> None:
    options = "-XX:SharedArchiveFile=/a.jsa -Xshare:auto"
    assert check_mapped("mixed mode, sharing", options) == ""
    assert check_mapped("mixed mode", "") == ""  # not given one: nothing to say
    assert check_mapped("mixed mode", options) == (
        "JVM class-data archive not used: the driver JVM did not map it ('mixed mode')")


def test_prune_keeps_the_most_recently_used_archives(tmp_path: Path) -> None:
    for age, name in enumerate(["new", "mid", "old"]):
        (tmp_path / f"{name}.jsa").write_bytes(b"a")
        (tmp_path / f"{name}.json").write_text("{}")
        os.utime(tmp_path / f"{name}.jsa", (1000 - age, 1000 - age))
    assert [p.name for p in prune(tmp_path, keep=2)] == ["old.jsa"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mid.jsa", "mid.json", "new.jsa", "new.json"]


def test_a_killed_builds_temporary_directory_is_removed_by_the_next_build(tmp_path: Path) -> None:
    (tmp_path / "build-x1y2").mkdir()
    (tmp_path / "build-x1y2" / "archive.jsa").write_bytes(b"partial")
    (tmp_path / "k.jsa").write_bytes(b"a")
    (tmp_path / "build.lock").write_bytes(b"")
    assert [p.name for p in remove_leftovers(tmp_path)] == ["build-x1y2"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["build.lock", "k.jsa"]
