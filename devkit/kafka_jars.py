"""The Kafka broker's jars: fetched from Maven Central with Maven (pinned ``KAFKA_VERSION``)
into a cache folder that every later start reuses."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from kip.devkit.settings import DevSettings

KAFKA_VERSION = "4.1.1"      # pinned: the broker the tests and `kip up` run
LOG4J_VERSION = "2.25.3"
SLF4J_VERSION = "2.0.17"

_POM = """<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>dev.kip</groupId><artifactId>kafka-broker</artifactId><version>1</version>
  <dependencies>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka_2.13</artifactId><version>{kafka}</version></dependency>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka-storage</artifactId><version>{kafka}</version></dependency>
    <dependency><groupId>org.slf4j</groupId><artifactId>slf4j-api</artifactId><version>{slf4j}</version></dependency>
    <dependency><groupId>org.apache.logging.log4j</groupId><artifactId>log4j-slf4j2-impl</artifactId><version>{log4j}</version></dependency>
    <dependency><groupId>org.apache.logging.log4j</groupId><artifactId>log4j-core</artifactId><version>{log4j}</version></dependency>
  </dependencies>
</project>
"""


class BrokerError(RuntimeError):
    """The local broker could not be fetched, started or reached."""


def cache_dir() -> Path:
    return DevSettings().cache_dir / f"kafka-{KAFKA_VERSION}"


def require_tool(name: str, why: str) -> str:
    path = shutil.which(name)
    if path is None:
        raise BrokerError(f"'{name}' is not on PATH; {why}. Install it (e.g. "
                          f"apt-get install {'openjdk-17-jre-headless' if name == 'java' else 'maven'})"
                          " and try again.")
    return path


def fetch_jars(log=print) -> Path:
    """The folder of broker jars, fetched with Maven on first use."""
    libs = cache_dir() / "libs"
    if (libs / f"kafka_2.13-{KAFKA_VERSION}.jar").exists():
        return libs
    mvn = require_tool("mvn", "Maven fetches the Kafka broker jars from Maven Central")
    require_tool("java", "the Kafka broker runs on Java 17+")
    work = cache_dir()
    work.mkdir(parents=True, exist_ok=True)
    (work / "pom.xml").write_text(_POM.format(kafka=KAFKA_VERSION, log4j=LOG4J_VERSION,
                                              slf4j=SLF4J_VERSION))
    staging = work / "libs.partial"
    shutil.rmtree(staging, ignore_errors=True)
    log(f"fetching Apache Kafka {KAFKA_VERSION} broker jars with Maven into {libs} "
        "(first time only, ~1 min)...")
    cmd = [mvn, "-B", "-q", "-f", str(work / "pom.xml"), "dependency:copy-dependencies",
           f"-DoutputDirectory={staging}", "-DincludeScope=runtime"]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise BrokerError(f"Maven could not fetch the Kafka jars:\n{done.stdout[-2000:]}"
                          f"{done.stderr[-2000:]}")
    staging.rename(libs)
    return libs
