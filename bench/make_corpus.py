"""Generate a seeded synthetic dataset + corpus at the scale of the WildTrace benchmark.

WildTrace is a long-document QA benchmark (481 tasks over 214 long sources, about 20% of
them Chinese).  Its documents cannot be shipped with batchrun's benchmarks, so this script
builds a stand-in with the same *shape*: the same number of documents and tasks, the same
spread of document sizes (50 KB .. 3 MB, average about 1.1 MB, about 235 MB in all), the
same language mix, and a few documents longer than the context caps (2,850,000 characters
for English, 850,000 for Chinese) so that out-of-context handling is exercised.  The text
is not meant to be meaningful, only varied: sentences with names, numbers and dates built
from word lists (English) or from a pool of common ideographs (Chinese).  Each task's
evidence ("clues") is planted verbatim in its document, so the answers are true of the text.

Usage:
    python bench/make_corpus.py OUT_DIR [--scale small|full] [--seed 0]
                                        [--real-corpus PATH | --no-real-corpus]

Output:
    OUT_DIR/corpus/doc_0001.txt ...      UTF-8 documents (stale doc_*.txt files are removed)
    OUT_DIR/data/wildtrace_synth.json    JSON list of task records
    OUT_DIR/data/wildtrace_synth.jsonl   the same records, one per line, with `ground_truth`
                                         serialized as a JSON string (UTF-8, not ASCII-escaped;
                                         split it on "\\n" only: some records hold U+2028)

Each record:
    {"task_id": "synth-0001", "question_text": "...", "corpus_file": "doc_0007.txt",
     "language": "en" | "zh", "category": "...", "paradigm": "...",
     "ground_truth": {"answer": "...", "clues": ["..."],
                      "scoring_rubric": [{"points": 40, "correct_criterion": "..."}, ...]}}
Rubric points sum to 100 (2 to 5 items).  `category` is the kind of logic the task leans
on (narrative, causal, temporal, quantitative); `paradigm` is the shape of the evidence
trail (single_hop, bridge, causal_chain, comparison, aggregation, chronology).

Scales:
    full   214 documents, 481 tasks, sizes 50 KB .. 3 MB (a mix of log-uniform and uniform
           sizes, weighted so the average is about 1.1 MB); exactly 4 English documents over the English cap and 3 Chinese
           documents over the CJK cap (all others stay below the caps).
    small  20 documents, 48 tasks, sizes 50 KB .. 400 KB, plus exactly one English document
           over the English cap and one Chinese document over the CJK cap.

Language rule (checked for every document): a Chinese document has more than 20 CJK
ideographs (U+4E00..U+9FFF) in its first 4,000 characters; an English one has none there.

A few "stress" documents contain U+2028, U+2029, U+0085, tabs, quotes and backslashes, and
their tasks carry quotes, backslashes and U+2028 in the question or answer, to exercise JSON
escaping.

Real text: with --real-corpus PATH (default: <repo>/../shared/corpus when that folder
exists), about 15% of the documents of each language are slices of the .txt files found
under PATH/en and PATH/zh (concatenated and wrapped around to reach the target size).

The output is deterministic for a given seed, scale and real corpus (same bytes).  The
script refuses to write inside the git repository it lives in.  Standard library only.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import random
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent

EN_CAP_CHARS = 2_850_000  # English documents longer than this exceed the context cap
ZH_CAP_CHARS = 850_000  # Chinese documents longer than this exceed the context cap
HEAD_CHARS = 4_000  # the language rule looks at this many leading characters
ZH_MIN_CJK = 21  # a Chinese document has more than 20 ideographs in its head
REGULAR_MAX_EN_CHARS = 2_800_000  # documents not meant to exceed a cap stay below these
REGULAR_MAX_ZH_CHARS = 830_000

ZH_FRACTION = 0.20  # share of Chinese documents
REAL_FRACTION = 0.15  # share of documents (per language) taken from the real corpus
STRESS_FRACTION = 0.06  # share of documents holding JSON-hostile characters


@dataclass(frozen=True)
class Scale:
    docs: int
    tasks: int
    min_bytes: int
    max_bytes: int
    mean_bytes: int | None  # None: plain log-uniform between min and max
    over_cap_en: int  # English documents forced over the English cap
    over_cap_zh: int  # Chinese documents forced over the CJK cap


SCALES = {
    "small": Scale(20, 48, 50_000, 400_000, None, 1, 1),
    "full": Scale(214, 481, 50_000, 3_000_000, 1_100_000, 4, 3),
}

# --------------------------------------------------------------------------------------
# Vocabulary
# --------------------------------------------------------------------------------------

EN_NOUNS = (
    "archive harbor ledger engine council river bridge market lantern signal garden tower "
    "valve circuit letter journal station village province mill furnace orchard vessel cargo "
    "treaty canal library manuscript clock warehouse quarry railway telegraph tunnel meadow "
    "parish barracks observatory foundry pipeline turbine reservoir dock chapel estate "
    "courtyard workshop pamphlet census petition ballot survey inventory contract invoice "
    "report schedule budget sensor battery cable panel compressor boiler pump gauge relay "
    "server backup patch release protocol audit incident ferry lighthouse granary tannery "
    "school hospital garrison vineyard cottage monastery embassy tribunal factory"
).split()
EN_VERBS_PAST = (
    "inspected repaired recorded delivered abandoned restored measured questioned approved "
    "rejected dismantled painted signed sealed opened closed shipped counted copied "
    "translated replaced examined announced postponed financed rebuilt flooded illuminated "
    "surveyed catalogued audited patched rebooted monitored borrowed mortgaged defended"
).split()
EN_VERBS_BASE = (
    "inspect repair record deliver restore measure approve dismantle seal open ship count "
    "copy translate replace examine announce postpone finance rebuild survey audit patch "
    "monitor defend negotiate"
).split()
EN_ADJ = (
    "quiet narrow ancient crowded silver northern eastern brittle damp heavy fragile busy "
    "hollow amber granite scarlet modest remote provisional temporary redundant faulty "
    "calibrated overdue seasonal municipal coastal bitter patient forgotten uneven costly"
).split()
EN_ADVERBS = (
    "slowly quickly carefully reluctantly openly briefly suddenly eventually quietly nearly "
    "barely repeatedly"
).split()
EN_FUNCTION = (
    "the the the a an of of in on at by for with from into over under after before while "
    "and and but or because although which that this those their his her its our"
).split()
EN_FIRST = (
    "Alice Bernard Clara Dmitri Elena Farid Greta Hiro Ingrid Jonas Kofi Lena Mateo Nadia "
    "Oskar Priya Quentin Rosa Samuel Tomas Ulla Victor Wen Xavier Yara Zoltan Amara Bruno "
    "Celia Desmond"
).split()
EN_LAST = (
    "Abernathy Brandt Castillo Duval Eriksen Fontaine Gallagher Haddad Ivanova Jensen "
    "Kowalski Lindqvist Moreau Nakamura Okafor Petrov Quist Romano Sato Thorne Uribe Vance "
    "Whitlock Yilmaz Zimmer Ashworth Bellamy Crane Delacroix Marsh"
).split()
EN_PLACES = [
    "Amberley", "Brightwater", "Calder", "Dunmore", "Eastwick", "Fairhaven", "Glenrock",
    "Harrowgate", "Ironbridge", "Juniper Point", "Kestrel Bay", "Larkspur", "Millbrook",
    "Northfield", "Oakhurst", "Pinecrest", "Queensport", "Redcliff", "Stonehaven",
    "Thornbury", "Upton", "Valemont", "Westmarch", "Yarrow", "Zephyr Hill",
]
EN_MONTHS = (
    "January February March April May June July August September October November December"
).split()
EN_UNITS = "meters kilograms liters tonnes volts hours kilometers degrees".split()
SYLLABLES = (
    "kor va ne thal ris mon dra vel quin sa bri tor len o da mar fen lu cas ter wyn "
    "bel ha rum sel tav ok ian dor pel"
).split()

EN_CAUSES = [
    "a cracked coolant valve", "a mislabeled fuse panel", "an unpatched firmware build",
    "a skipped pressure inspection", "a loose grounding strap",
    "water seeping into the control room", "an exhausted night-shift operator",
    "an aging backup battery", "a missing sensor calibration record",
    "a substituted gasket material", "a blocked drainage culvert",
    "a misread maintenance schedule", "a budget freeze on spare parts", "a corroded feed pipe",
    "an overloaded relay", "a forged inspection certificate",
]

# Common simplified ideographs, roughly by frequency (filtered to U+4E00..U+9FFF below).
_HANZI_RAW = (
    "的一是在不了有和人这中大为上个国我以要他时来用们生到作地于出就分对成会可主发年动同工也能"
    "下过子说产种面而方后多定行学法所民得经十三之进着等部度家电力里如水化高自二理起小物现实加"
    "量都两体制机当使点从业本去把性好应开它合还因由其些然前外天政四日那社义事平形相全表间样与"
    "关各重新线内数正心反你明看原又么利比或但质气第向道命此变条只没结解问意建月公无系军很情者"
    "最立代想已通并提直题党程展五果料象员革位入常文总次品式活设及管特件长求老头基资边流路级少"
    "图山统接知较将组见计别她手角期根论运农指几九区强放决西被干做必战先回则任取据处队南给色光"
    "门即保治北造百规热领七海口东导器压志世金增争济阶油思术极交受联什认六共权收证改清己美再采"
    "转更单风切打白教速花带安场身车例真务具万每目至达走积示议声报斗完类八离华名确才科张信马节"
    "话米整空元况今集温传土许步群广石记需段研界拉林律叫且究观越织装影算低持音众书布复容儿须际"
    "商非验连断深难近矿千周委素技备半办青省列习响约支般史感劳便团往酸历市克何除消构府称太准精"
    "值号率族维划选标写存候毛亲快效斯院查江型眼王按格养易置派层片始却专状育厂京识适属圆包火住"
    "调满县局照参红细引听该铁价严龙飞"
)
_seen: set[str] = set()
HANZI = "".join(
    c for c in _HANZI_RAW if "\u4e00" <= c <= "\u9fff" and not (c in _seen or _seen.add(c))
)
ZH_SURNAMES = (
    "王李张刘陈杨黄赵吴周徐孙马朱胡郭何高林罗郑梁谢宋唐许韩冯邓曹彭曾肖田董袁潘于蒋蔡余杜叶程苏"
    "魏吕丁任沈姚卢姜崔钟谭陆汪范金石廖贾夏韦付方白邹孟熊秦邱江尹薛段雷侯史陶黎贺顾郝龚邵钱严"
)
ZH_CAUSES = [
    "冷却阀门出现裂缝", "保险丝面板标签错误", "固件未及时更新", "压力检查被跳过", "接地带松动",
    "控制室进水", "操作员连续值班过久", "备用电池老化", "传感器校准记录缺失", "供应商更换了密封材料",
    "排水涵洞堵塞", "维修计划被误读", "备件预算被冻结", "给水管道腐蚀", "继电器过载", "检验证书被伪造",
]

# Entries that stress JSON escaping: tabs, quotes, backslashes and Unicode line breaks.
EN_STRESS = [
    'The clerk typed "C:\\ledger\\{n}\\notes.txt" and left a lone backslash \\ at the end. ',
    "Columns:\tid\tname\tvalue\t{n}\n",
    "Line one of the note\u2028continues on a second line of the same paragraph. ",
    "The section ends here.\u2029",
    "An old printer emitted\u0085a next-line control in the middle of a sentence. ",
    'She wrote {{"key": "value \\"{n}\\"", "path": "a\\\\b"}} on the board. ',
    "Escapes such as \\n, \\t, \\u2028 and \\\\ appear here literally. ",
    "\tIndented with a tab, quoted 'single' and \"double\", number {n}. ",
]
ZH_STRESS = [
    "档案路径为\"D:\\档案\\{n}\"，末尾还有一个反斜杠\\。",
    "表格：\t编号\t名称\t{n}\n",
    "第一行内容\u2028第二行内容，属于同一段落。",
    "本节到此结束。\u2029",
    "旧打印机输出了\u0085一个控制字符。",
    "他在黑板上写下{{\"键\": \"值\\\"{n}\\\"\"}}。",
]


# --------------------------------------------------------------------------------------
# Sentence pools
# --------------------------------------------------------------------------------------


def _plural(noun: str) -> str:
    if noun.endswith("y") and noun[-2] not in "aeiou":
        return noun[:-1] + "ies"
    if noun.endswith(("s", "x", "ch", "sh")):
        return noun + "es"
    return noun + "s"


def _en_date(r: random.Random) -> str:
    y, m, d = r.randint(1820, 2024), r.randint(1, 12), r.randint(1, 28)
    style = r.randrange(3)
    if style == 0:
        return f"{EN_MONTHS[m - 1]} {d}, {y}"
    if style == 1:
        return f"{y}-{m:02d}-{d:02d}"
    return f"{d} {EN_MONTHS[m - 1]} {y}"


def _en_person(r: random.Random) -> str:
    return f"{r.choice(EN_FIRST)} {r.choice(EN_LAST)}"


def _en_salad(r: random.Random, lo: int = 6, hi: int = 22) -> str:
    n = r.randint(lo, hi)
    words = r.choices(EN_NOUNS + EN_ADJ + EN_FUNCTION + EN_VERBS_PAST + EN_ADVERBS, k=n)
    if n > 9 and r.random() < 0.5:
        words[r.randrange(3, n - 2)] += ","
    return " ".join(words).capitalize()


def _en_sentence(r: random.Random) -> str:
    kind = r.randrange(10)
    if kind < 3:
        return _en_salad(r) + r.choice(".....?!")
    noun, adj = r.choice(EN_NOUNS), r.choice(EN_ADJ)
    if kind == 3:
        return (f"On {_en_date(r)}, {_en_person(r)} {r.choice(EN_VERBS_PAST)} the {adj} "
                f"{noun} at {r.choice(EN_PLACES)}.")
    if kind == 4:
        return (f"{_en_person(r)} reported that {r.randint(2, 9999):,} {_plural(noun)} had been "
                f"{r.choice(EN_VERBS_PAST)} in {r.choice(EN_PLACES)} by {r.randint(1820, 2024)}.")
    if kind == 5:
        return (f"The {noun} of {r.choice(EN_PLACES)} measured {r.uniform(0.1, 9999):.2f} "
                f"{r.choice(EN_UNITS)} in {r.choice(EN_MONTHS)} {r.randint(1820, 2024)}.")
    if kind == 6:
        return (f"According to {_en_person(r)}, the {adj} {noun} cost "
                f"${r.randint(100, 999_999):,}.{r.randint(0, 99):02d} and took "
                f"{r.randint(2, 400)} days to {r.choice(EN_VERBS_BASE)}.")
    if kind == 7:
        return (f"Section {r.randint(1, 40)}.{r.randint(1, 20)} notes that "
                f"{r.uniform(0, 100):.1f}% of the {_plural(noun)} were {adj}.")
    if kind == 8:
        return (f'"{_en_salad(r, 3, 8)}," said {_en_person(r)}, '
                f'"{_en_salad(r, 4, 10).lower()}."')
    return (f"Entry #{r.randint(1, 99999)}: {_en_person(r)}, {r.choice(EN_PLACES)}, "
            f"{_en_date(r)}, {r.randint(1, 5000)} units, {r.choice(EN_ADVERBS)} "
            f"{r.choice(EN_VERBS_PAST)}.")


def build_en_pool(r: random.Random, size: int) -> list[str]:
    """English pool entries; each carries its own trailing separator."""
    pool = []
    for _ in range(size):
        x = r.random()
        if x < 0.01:
            pool.append(f"\n\nChapter {r.randint(1, 99)}: The {r.choice(EN_ADJ).capitalize()} "
                        f"{r.choice(EN_NOUNS).capitalize()}\n\n")
        else:
            pool.append(_en_sentence(r) + ("\n\n" if x < 0.15 else " "))
    return pool


class HanziPicker:
    """Draws ideographs with a Zipf-like bias towards the front of HANZI."""

    def __init__(self) -> None:
        total, self.cum = 0.0, []
        for rank in range(len(HANZI)):
            total += 1.0 / (rank + 15)
            self.cum.append(total)

    def take(self, r: random.Random, k: int) -> str:
        return "".join(r.choices(HANZI, cum_weights=self.cum, k=k))


def _zh_date(r: random.Random) -> str:
    return f"{r.randint(1820, 2024)}年{r.randint(1, 12)}月{r.randint(1, 28)}日"


def _zh_person(r: random.Random, hp: HanziPicker) -> str:
    return r.choice(ZH_SURNAMES) + hp.take(r, r.randint(1, 2))


def _zh_sentence(r: random.Random, hp: HanziPicker) -> str:
    clauses = []
    for _ in range(r.randint(1, 4)):
        clause = hp.take(r, r.randint(3, 12))
        if r.random() < 0.25:
            extra = r.randrange(4)
            if extra == 0:
                clause = _zh_date(r) + clause
            elif extra == 1:
                clause += f"共{r.randint(2, 99999)}{r.choice('元份箱人次台册')}"
            elif extra == 2:
                clause = _zh_person(r, hp) + clause
            else:
                clause += f"第{r.randint(1, 300)}{r.choice('章条号页')}"
        clauses.append(clause)
    return "，".join(clauses) + r.choice("。。。。。。。。！？")


def build_zh_pool(r: random.Random, hp: HanziPicker, size: int) -> list[str]:
    pool = []
    for _ in range(size):
        x = r.random()
        if x < 0.01:
            pool.append(f"\n第{r.randint(1, 99)}章 {hp.take(r, 4)}\n")
        else:
            pool.append(_zh_sentence(r, hp) + ("\n" if x < 0.15 else ""))
    return pool


# --------------------------------------------------------------------------------------
# Document plan and text
# --------------------------------------------------------------------------------------


@dataclass
class DocPlan:
    index: int  # 1-based
    lang: str  # "en" | "zh"
    target_chars: int
    real: bool = False
    stress: bool = False
    facts: list[str] = field(default_factory=list)

    @property
    def name(self) -> str:
        return f"doc_{self.index:04d}.txt"


def cjk_count(text: str) -> int:
    return sum(1 for c in text if "\u4e00" <= c <= "\u9fff")


def language_ok(text: str, lang: str) -> bool:
    head = cjk_count(text[:HEAD_CHARS])
    return head >= ZH_MIN_CJK if lang == "zh" else head == 0


def plan_documents(scale: Scale, rng: random.Random, zh_bpc: float,
                   real_langs: set[str]) -> list[DocPlan]:
    n = scale.docs
    zh_ids = set(rng.sample(range(n), round(n * ZH_FRACTION)))
    langs = ["zh" if i in zh_ids else "en" for i in range(n)]
    en_list = [i for i in range(n) if langs[i] == "en"]
    zh_list = [i for i in range(n) if langs[i] == "zh"]

    # Documents forced over the context caps (in characters).
    forced: dict[int, int] = {}
    for i in rng.sample(en_list, scale.over_cap_en):
        forced[i] = rng.randint(EN_CAP_CHARS + 10_000, 2_990_000)
    for i in rng.sample(zh_list, scale.over_cap_zh):
        forced[i] = rng.randint(ZH_CAP_CHARS + 10_000, 1_000_000)

    def bpc(i: int) -> float:
        return zh_bpc if langs[i] == "zh" else 1.0

    # Regular documents: a mixture of log-uniform (share p) and uniform sizes between min
    # and max.  Pure log-uniform averages ~0.72 MB over 50 KB..3 MB, so p is solved for so
    # that the mean over all documents hits mean_bytes.  Regular documents stay under the
    # caps, so exactly the forced ones exceed them.
    regular = [i for i in range(n) if i not in forced]
    us = [rng.random() for _ in regular]
    coins = [rng.random() for _ in regular]
    lo_b = scale.min_bytes
    hi_b = {"en": min(scale.max_bytes, REGULAR_MAX_EN_CHARS),
            "zh": min(scale.max_bytes, REGULAR_MAX_ZH_CHARS * zh_bpc)}
    tops = [hi_b[langs[i]] for i in regular]

    def sizes(p: float) -> list[float]:
        return [lo_b * (hi / lo_b) ** u if c < p else lo_b + (hi - lo_b) * u
                for u, c, hi in zip(us, coins, tops)]

    p = 1.0
    if scale.mean_bytes is not None:
        forced_bytes = sum(c * bpc(i) for i, c in forced.items())
        want = (scale.mean_bytes * n - forced_bytes) / len(regular)
        lo_p, hi_p = 0.0, 1.0
        for _ in range(60):
            p = (lo_p + hi_p) / 2
            if sum(sizes(p)) / len(regular) > want:
                lo_p = p  # too big: more log-uniform documents shrink the mean
            else:
                hi_p = p

    targets = dict(forced)
    for i, b in zip(regular, sizes(p)):
        targets[i] = int(b / bpc(i))

    plans = [DocPlan(i + 1, langs[i], targets[i]) for i in range(n)]

    for lang, ids in (("en", en_list), ("zh", zh_list)):
        if lang in real_langs:
            for i in rng.sample(ids, round(len(ids) * REAL_FRACTION)):
                plans[i].real = True
    n_stress = max(2, round(n * STRESS_FRACTION))
    n_stress_zh = max(1, round(n_stress * ZH_FRACTION))
    for lang, count in (("zh", n_stress_zh), ("en", n_stress - n_stress_zh)):
        candidates = [p for p in plans if p.lang == lang and not p.real]
        for p in rng.sample(candidates, min(count, len(candidates))):
            p.stress = True
    return plans


def synth_text(r: random.Random, plan: DocPlan, pool: list[str], local: list[str],
               stress: list[str], title: str) -> str:
    """Assemble about plan.target_chars characters from pool entries, in large chunks."""
    avg = sum(map(len, pool)) / len(pool)
    parts, total = [title], len(title)
    while total < plan.target_chars:
        k = int((plan.target_chars - total) / avg) + 64
        chunk = r.choices(pool, k=k)
        for _ in range(k // 25):  # sprinkle document-specific sentences
            chunk[r.randrange(k)] = r.choice(local)
        if plan.stress:  # every stress entry at least once, then more at random
            extra = [r.choice(stress) for _ in range(k // 150)]
            for entry in stress + extra:
                chunk[r.randrange(k)] = entry.format(n=r.randint(1, 99999))
        piece = "".join(chunk)
        parts.append(piece)
        total += len(piece)
    return "".join(parts)[: plan.target_chars].rstrip() + "\n"


def real_text(r: random.Random, plan: DocPlan, source: str) -> str | None:
    """A slice of the real corpus (wrapping around) that satisfies the language rule."""
    size = len(source)
    for _ in range(30):
        start = source.find("\n", r.randrange(size)) + 1  # start at a line (0 if none)
        pieces, need, pos = [], plan.target_chars, start
        while need > 0:
            piece = source[pos: pos + need]
            pieces.append(piece)
            need -= len(piece)
            pos = 0
            if need > 0:
                pieces.append("\n\n")
                need -= 2
        text = "".join(pieces)[: plan.target_chars].rstrip() + "\n"
        if language_ok(text, plan.lang):
            return text
    return None


def plant_facts(r: random.Random, text: str, facts: list[str]) -> str:
    """Insert each fact as its own line at a random line start."""
    cuts = []
    for order, fact in enumerate(facts):
        pos = r.randrange(len(text) // 50, len(text))
        nl = text.find("\n", pos)
        cuts.append((len(text) if nl == -1 else nl + 1, order, fact))
    cuts.sort()
    out, prev = [], 0
    for pos, _, fact in cuts:
        out.append(text[prev:pos])
        out.append(fact + "\n")
        prev = pos
    out.append(text[prev:])
    return "".join(out)


# --------------------------------------------------------------------------------------
# Tasks
# --------------------------------------------------------------------------------------

PARADIGMS = [  # (paradigm, category, weight)
    ("single_hop", "narrative", 20),
    ("bridge", "narrative", 20),
    ("causal_chain", "causal", 20),
    ("comparison", "quantitative", 15),
    ("aggregation", "quantitative", 10),
    ("chronology", "temporal", 15),
]


class Names:
    """Made-up proper names, unique across the whole dataset."""

    def __init__(self, hp: HanziPicker) -> None:
        self.used: set[str] = set()
        self.hp = hp

    def en(self, r: random.Random) -> str:
        while True:
            name = "".join(r.choices(SYLLABLES, k=r.randint(2, 3))).capitalize()
            if len(name) >= 5 and name not in self.used:
                self.used.add(name)
                return name

    def zh(self, r: random.Random) -> str:
        while True:
            name = self.hp.take(r, r.randint(2, 3))
            if name not in self.used:
                self.used.add(name)
                return name


def _rubric(*items: tuple[int, str]) -> list[dict]:
    assert sum(p for p, _ in items) == 100 and 2 <= len(items) <= 5
    return [{"points": p, "correct_criterion": c} for p, c in items]


def _random_date(r: random.Random) -> dt.date:
    return dt.date(1850, 1, 1) + dt.timedelta(days=r.randrange(170 * 365))


def _fmt_date(d: dt.date, lang: str) -> str:
    if lang == "zh":
        return f"{d.year}年{d.month}月{d.day}日"
    return f"{EN_MONTHS[d.month - 1]} {d.day}, {d.year}"


def make_task(r: random.Random, names: Names, lang: str, stress: bool) -> dict:
    """One task: question, answer, the facts to plant, and a rubric."""
    paradigm, category = r.choices([(p, c) for p, c, _ in PARADIGMS],
                                   weights=[w for *_, w in PARADIGMS])[0]
    zh = lang == "zh"
    nm = (lambda: names.zh(r)) if zh else (lambda: names.en(r))

    if paradigm == "single_hop":
        ent = (nm() + r.choice(["档案", "手稿", "契约", "年鉴"])) if zh else \
            f"the {nm()} {r.choice(['Ledger', 'Codex', 'Charter', 'Almanac'])}"
        code = f"{r.choice('ABCDEFGHKLMNPRSTVX')}{r.choice('ABCDEFGHKLMNPRSTVX')}" + \
            ("\\" if stress else "-") + str(r.randint(1000, 99999))
        if zh:
            facts = [f"{ent}的登记编号为“{code}”。"]
            q = f"根据文档，{ent}的登记编号是多少？"
            rub = _rubric((70, f"给出登记编号 {code}"), (30, f"指明该编号属于{ent}"))
        else:
            facts = [f'The registry number of {ent} was recorded as "{code}".']
            q = f"According to the document, what registry number was recorded for {ent}?"
            rub = _rubric((70, f"States the registry number {code}"),
                          (30, f"Attributes the number to {ent}"))
        answer = code

    elif paradigm == "bridge":
        if zh:
            ent, vault, town = nm() + "档案", nm() + "库房", nm() + "镇"
            facts = [f"{ent}后来被转存到{vault}。", f"{vault}位于{town}的城郊。"]
            q = f"{ent}最终保存在哪个镇？"
            answer = town
            rub = _rubric((40, f"指出{ent}被转存到{vault}"), (60, f"回答{town}"))
        else:
            ent = f"the {nm()} {r.choice(['Ledger', 'Codex', 'Charter', 'Almanac'])}"
            vault = f"the {nm()} {r.choice(['Vault', 'Repository', 'Strongroom'])}"
            town = f"{nm()}{r.choice(['ford', ' Hollow', 'wick', 'bury'])}"
            facts = [f"{ent[0].upper() + ent[1:]} was moved into {vault} for safekeeping.",
                     f"{vault[0].upper() + vault[1:]} stands on the outskirts of {town}."]
            q = f"In which town is {ent} kept?"
            answer = town
            rub = _rubric((40, f"Identifies that {ent} was moved into {vault}"),
                          (60, f"Answers {town}"))

    elif paradigm == "causal_chain":
        hops = r.choice([2, 3])
        causes = r.sample(ZH_CAUSES if zh else EN_CAUSES, hops)
        day = _fmt_date(_random_date(r), lang)
        if zh:
            system = f"{nm()}{r.randint(1, 9)}号{r.choice(['泵站', '锅炉', '变电站', '闸门'])}"
            facts = [f"{day}，{system}发生故障，直接原因是{causes[0]}。"]
            facts += [f"调查人员后来发现，{a}是由{b}造成的。" for a, b in zip(causes, causes[1:])]
            q = f"导致{system}故障的根本原因是什么？"
            steps = [f"指出中间原因：{c}" for c in causes[:-1]]
            final = f"给出根本原因：{causes[-1]}"
        else:
            system = f"the {nm()} {r.choice(['pumping station', 'boiler', 'substation', 'sluice gate'])}"
            facts = [f"The failure of {system} on {day} was traced to {causes[0]}."]
            facts += [f"Investigators later found that {a} had been caused by {b}."
                      for a, b in zip(causes, causes[1:])]
            q = f"What root cause ultimately led to the failure of {system}?"
            steps = [f"Identifies the intermediate cause: {c}" for c in causes[:-1]]
            final = f"Names the root cause: {causes[-1]}"
        answer = causes[-1]
        rub = _rubric((30, steps[0]), (70, final)) if hops == 2 else \
            _rubric((20, steps[0]), (30, steps[1]), (50, final))

    elif paradigm == "comparison":
        year = r.randint(1860, 2020)
        a, b = r.sample(range(100, 20000), 2)
        if zh:
            e1, e2 = nm() + "书院", nm() + "书院"
            facts = [f"截至{year}年底，{e1}共收录了{a}份手稿。", f"截至{year}年底，{e2}共收录了{b}份手稿。"]
            q = f"截至{year}年底，{e1}和{e2}哪一个收录的手稿更多？多出多少份？"
            win = e1 if a > b else e2
            answer = f"{win}，多{abs(a - b)}份"
            rub = _rubric((25, f"找到{e1}的数量 {a}"), (25, f"找到{e2}的数量 {b}"),
                          (30, f"判断{win}更多"), (20, f"算出差值 {abs(a - b)}"))
        else:
            e1, e2 = (f"the {nm()} {r.choice(['Library', 'Institute', 'Archive'])}" for _ in "ab")
            facts = [f"By the end of {year}, {e} had catalogued {n:,} manuscripts."
                     for e, n in ((e1, a), (e2, b))]
            q = (f"By the end of {year}, which had catalogued more manuscripts, {e1} or {e2}, "
                 "and by how many?")
            win = e1 if a > b else e2
            answer = f"{win}, by {abs(a - b):,} manuscripts"
            rub = _rubric((25, f"Finds the count for {e1}: {a:,}"),
                          (25, f"Finds the count for {e2}: {b:,}"),
                          (30, f"Concludes that {win} catalogued more"),
                          (20, f"Computes the difference: {abs(a - b):,}"))

    elif paradigm == "aggregation":
        months = sorted(r.sample(range(1, 13), r.choice([3, 4])))
        year = r.randint(1860, 2020)
        counts = [r.randint(10, 5000) for _ in months]
        each = 20 if len(months) == 3 else 15
        if zh:
            org = nm() + "商会"
            facts = [f"{year}年{m}月，{org}运出了{c}箱货物。" for m, c in zip(months, counts)]
            q = f"{org}在{year}年{'、'.join(f'{m}月' for m in months)}共运出多少箱货物？"
            answer = f"{sum(counts)}箱"
            rub = _rubric(*[(each, f"找到{m}月的数量 {c}") for m, c in zip(months, counts)],
                          (40, f"给出总数 {sum(counts)}"))
        else:
            org = f"the {nm()} Trading Company"
            facts = [f"In {EN_MONTHS[m - 1]} {year}, {org} shipped {c:,} crates of cargo."
                     for m, c in zip(months, counts)]
            names_ = [EN_MONTHS[m - 1] for m in months]
            q = (f"How many crates did {org} ship in total in "
                 f"{', '.join(names_[:-1])} and {names_[-1]} of {year}?")
            answer = f"{sum(counts):,} crates"
            rub = _rubric(*[(each, f"Finds the {EN_MONTHS[m - 1]} figure: {c:,}")
                            for m, c in zip(months, counts)],
                          (40, f"Gives the total: {sum(counts):,}"))

    else:  # chronology
        d1, d2 = _random_date(r), _random_date(r)
        while d2 == d1:
            d2 = _random_date(r)
        if zh:
            kinds = ["协定的签署", "大桥的通车", "码头的水灾", "电台的首次广播"]
            ev1, ev2 = (nm() + r.choice(kinds) for _ in "ab")
            facts = [f"{ev}发生在{_fmt_date(d, lang)}。" for ev, d in ((ev1, d1), (ev2, d2))]
            q = f"{ev1}和{ev2}哪一个先发生？两者相隔多少天？"
            first, fd = (ev1, d1) if d1 < d2 else (ev2, d2)
            gap = abs((d2 - d1).days)
            answer = f"{first}先发生（{_fmt_date(fd, lang)}），两者相隔{gap}天"
            rub = _rubric((20, f"找到{ev1}的日期 {_fmt_date(d1, lang)}"),
                          (20, f"找到{ev2}的日期 {_fmt_date(d2, lang)}"),
                          (30, f"判断{first}先发生"), (30, f"算出相隔 {gap} 天"))
        else:
            kinds = ["signing of the {} Accord", "opening of the {} Bridge",
                     "flooding of {} Quay", "first broadcast from {} Station"]
            ev1, ev2 = ("the " + r.choice(kinds).format(nm()) for _ in "ab")
            facts = [f"{ev[0].upper() + ev[1:]} took place on {_fmt_date(d, lang)}."
                     for ev, d in ((ev1, d1), (ev2, d2))]
            q = f"Which happened first, {ev1} or {ev2}, and how many days apart were they?"
            first, fd = (ev1, d1) if d1 < d2 else (ev2, d2)
            gap = abs((d2 - d1).days)
            answer = f"{first[0].upper() + first[1:]} happened first ({_fmt_date(fd, lang)}); " \
                     f"they were {gap:,} days apart"
            rub = _rubric((20, f"Finds the date of {ev1}: {_fmt_date(d1, lang)}"),
                          (20, f"Finds the date of {ev2}: {_fmt_date(d2, lang)}"),
                          (30, f"Concludes that {first} happened first"),
                          (30, f"Computes the gap: {gap:,} days"))

    if stress:  # exercise JSON escaping in the records themselves
        q += "\u2028" + ("（请“简要”作答。）" if zh else '(Answer "briefly", one line.)')
    return {
        "question_text": q,
        "language": lang,
        "category": category,
        "paradigm": paradigm,
        "facts": facts,
        "ground_truth": {"answer": answer, "clues": list(facts), "scoring_rubric": rub},
    }


# --------------------------------------------------------------------------------------
# Main
# --------------------------------------------------------------------------------------


def protected_roots() -> list[Path]:
    roots = [REPO_ROOT]
    try:
        top = subprocess.run(["git", "rev-parse", "--show-toplevel"], capture_output=True,
                             text=True, timeout=10, cwd=Path.cwd())
        if top.returncode == 0 and top.stdout.strip():
            roots.append(Path(top.stdout.strip()).resolve())
    except (OSError, subprocess.SubprocessError):
        pass
    return roots


def inside_repo(out: Path) -> Path | None:
    """The repository root OUT_DIR would fall inside, or None."""
    out = out.expanduser().resolve()
    probe = out
    while not probe.exists():
        probe = probe.parent
    try:
        top = subprocess.run(["git", "-C", str(probe), "rev-parse", "--show-toplevel"],
                             capture_output=True, text=True, timeout=10)
        out_top = Path(top.stdout.strip()).resolve() if top.returncode == 0 else None
    except (OSError, subprocess.SubprocessError):
        out_top = None
    for root in protected_roots():
        if out == root or root in out.parents or out_top == root:
            return root
    return None


def load_real_corpus(path: Path) -> dict[str, str]:
    """Concatenated text of PATH/<lang>/**/*.txt, per language, in sorted path order."""
    found = {}
    for lang in ("en", "zh"):
        files = sorted((path / lang).rglob("*.txt")) if (path / lang).is_dir() else []
        texts = [f.read_text(encoding="utf-8", errors="replace").lstrip("\ufeff") for f in files]
        joined = "\n\n".join(t for t in texts if t.strip())
        if joined:
            found[lang] = joined
    return found


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out_dir", type=Path, help="output folder (must be outside the repository)")
    ap.add_argument("--scale", choices=sorted(SCALES), default="small")
    ap.add_argument("--seed", type=int, default=0)
    real = ap.add_mutually_exclusive_group()
    real.add_argument("--real-corpus", type=Path, default=None,
                      help="folder with en/ and zh/ .txt files to mix in "
                           "(default: <repo>/../shared/corpus if it exists)")
    real.add_argument("--no-real-corpus", action="store_true",
                      help="use synthetic text only")
    return ap.parse_args(argv)


def fail(message: str) -> None:
    print(f"make_corpus: error: {message}", file=sys.stderr)
    sys.exit(1)


def main(argv: list[str] | None = None) -> int:
    t0 = time.perf_counter()
    args = parse_args(argv)
    scale = SCALES[args.scale]
    out = args.out_dir.expanduser().resolve()

    root = inside_repo(out)
    if root is not None:
        fail(f"OUT_DIR {out} is inside the git repository {root}; "
             "write the corpus somewhere else (for example /tmp/bench-small).")

    real_path = args.real_corpus
    if real_path is None and not args.no_real_corpus:
        default = REPO_ROOT.parent / "shared" / "corpus"
        real_path = default if default.is_dir() else None
    if args.no_real_corpus:
        real_path = None
    if real_path is not None and not real_path.is_dir():
        fail(f"--real-corpus {real_path} is not a folder")
    real_sources = load_real_corpus(real_path) if real_path is not None else {}

    base = f"wildtrace-synth/{args.seed}/{args.scale}"
    hp = HanziPicker()
    en_pool = build_en_pool(random.Random(f"{base}/pool/en"), 40_000)
    zh_pool = build_zh_pool(random.Random(f"{base}/pool/zh"), hp, 40_000)
    zh_bpc = sum(len(s.encode()) for s in zh_pool) / sum(map(len, zh_pool))

    plans = plan_documents(scale, random.Random(f"{base}/plan"), zh_bpc, set(real_sources))

    # Tasks: one per document, the rest spread with weight ~ sqrt(size).
    trng = random.Random(f"{base}/tasks")
    per_doc = [1] * len(plans)
    weights = [math.sqrt(p.target_chars) for p in plans]
    for i in trng.choices(range(len(plans)), weights=weights, k=scale.tasks - len(plans)):
        per_doc[i] += 1
    names = Names(hp)
    tasks = []
    for plan, count in zip(plans, per_doc):
        for _ in range(count):
            task = make_task(trng, names, plan.lang, plan.stress)
            plan.facts.extend(task.pop("facts"))
            task["corpus_file"] = plan.name
            tasks.append(task)
    trng.shuffle(tasks)

    # Documents.
    corpus_dir, data_dir = out / "corpus", out / "data"
    corpus_dir.mkdir(parents=True, exist_ok=True)
    data_dir.mkdir(parents=True, exist_ok=True)
    for stale in corpus_dir.glob("doc_*.txt"):
        stale.unlink()

    stats = {"chars": 0, "bytes": 0, "zh": 0, "over_en": 0, "over_zh": 0, "real": 0,
             "stress": 0, "sizes": []}
    for plan in plans:
        r = random.Random(f"{base}/doc/{plan.index}")
        text = None
        if plan.real:
            text = real_text(r, plan, real_sources[plan.lang])
            plan.real = text is not None
        if text is None:
            if plan.lang == "zh":
                local = [_zh_person(r, hp) + s for s in r.sample(zh_pool, 300)]
                title = f"{hp.take(r, 4)}志 第{plan.index}卷\n\n"
                text = synth_text(r, plan, zh_pool, local, ZH_STRESS, title)
            else:
                people = [_en_person(r) for _ in range(6)]
                local = [f"{r.choice(people)} {r.choice(['noted', 'added', 'wrote'])}: {s}"
                         for s in r.sample(en_pool, 300)]
                title = (f"The {r.choice(EN_ADJ).capitalize()} {r.choice(EN_NOUNS).capitalize()} "
                         f"Papers, Volume {plan.index}\n\n")
                text = synth_text(r, plan, en_pool, local, EN_STRESS, title)
        text = plant_facts(r, text, plan.facts)
        if not language_ok(text, plan.lang):
            raise AssertionError(f"{plan.name} breaks the {plan.lang} language rule")
        data = text.encode("utf-8")
        (corpus_dir / plan.name).write_bytes(data)

        stats["chars"] += len(text)
        stats["bytes"] += len(data)
        stats["sizes"].append(len(data))
        stats["zh"] += plan.lang == "zh"
        stats["over_en"] += plan.lang == "en" and len(text) > EN_CAP_CHARS
        stats["over_zh"] += plan.lang == "zh" and len(text) > ZH_CAP_CHARS
        stats["real"] += plan.real
        stats["stress"] += plan.stress

    # Records.
    records = []
    for n, task in enumerate(tasks, 1):
        records.append({
            "task_id": f"synth-{n:04d}",
            "question_text": task["question_text"],
            "corpus_file": task["corpus_file"],
            "language": task["language"],
            "category": task["category"],
            "paradigm": task["paradigm"],
            "ground_truth": task["ground_truth"],
        })
    with open(data_dir / "wildtrace_synth.json", "w", encoding="utf-8", newline="\n") as f:
        json.dump(records, f, ensure_ascii=False, indent=2)
        f.write("\n")
    with open(data_dir / "wildtrace_synth.jsonl", "w", encoding="utf-8", newline="\n") as f:
        for rec in records:
            line = dict(rec, ground_truth=json.dumps(rec["ground_truth"], ensure_ascii=False))
            f.write(json.dumps(line, ensure_ascii=False) + "\n")

    sizes = stats["sizes"]
    rows = [
        ("output", str(out)),
        ("scale / seed", f"{args.scale} / {args.seed}"),
        ("real corpus", f"{real_path} ({stats['real']} documents)" if real_path else "none"),
        ("documents", f"{len(plans):,}"),
        ("tasks", f"{len(records):,}"),
        ("total characters", f"{stats['chars']:,}"),
        ("total bytes", f"{stats['bytes']:,} ({stats['bytes'] / 1e6:.1f} MB)"),
        ("document bytes min/avg/max",
         f"{min(sizes):,} / {sum(sizes) // len(sizes):,} / {max(sizes):,}"),
        ("Chinese documents", f"{stats['zh']}"),
        ("stress documents", f"{stats['stress']}"),
        (f"over English cap (>{EN_CAP_CHARS:,} chars)", f"{stats['over_en']}"),
        (f"over CJK cap (>{ZH_CAP_CHARS:,} chars)", f"{stats['over_zh']}"),
        ("seconds", f"{time.perf_counter() - t0:.1f}"),
    ]
    width = max(len(k) for k, _ in rows)
    print("WildTrace synthetic corpus")
    for key, value in rows:
        print(f"  {key:<{width}}  {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
