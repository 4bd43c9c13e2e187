"""The tiny benchmark world: a deterministic stand-in for SynSQL + BIRD that CPUs can train on.

`build_tinyworld(out_dir, seed)` writes, in the real formats (§7), eight small SQLite databases,
a SynSQL-format training pool over six of them (`train/data.json`), a BIRD-format dev set over
all eight (`dev/dev.json`, two databases never seen in training), Spider-format `tables.json`
files, BIRD `database_description` CSVs, and `routes.json`: for each question whose answer can
be reached through two or more distinct column sets (§1, "alternative executable routes"), the
gold SQL first and then each alternative, every one re-executed here and kept only when its rows
equal the gold's as a multiset (floats rounded to 6 places, as §4 step 4 compares).

The routes are built in on purpose: denormalised copies (`loans.member_city` repeats
`members.city`), derived columns (`OrderItems."Line Total"` = Quantity x "Unit Price",
`age` next to `birth_year`) and shortcut foreign keys (`enrollments.dept_id` next to the path
through `courses`). Column sets follow the kit rule of `sqlcolumns.py`: "table.column" in the
schema's original case; a table read only through `*` contributes its primary key.

Same seed, same bytes: only `random.Random` instances seeded from (seed, name) are used, every
listing is sorted or in a fixed order, no timestamps, fixed SQLite page size and insert order.
"""
from __future__ import annotations

import argparse
import csv
import hashlib
import io
import itertools
import json
import re
import shutil
import sqlite3
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

import datetime
import random

from .schema import quote_identifier as qi

GENERATOR_VERSION = hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:16]
KIND = "acesql-tinyworld"
LEVELS = ("Simple", "Moderate", "Complex", "Highly Complex")  # SynSQL sql_complexity (§3.1)
LEVEL_MIX = (0.25, 0.30, 0.25, 0.20)  # UNKNOWN: kit's share of each level in the tiny pool
# UNKNOWN mapping (BIRD labels difficulty by hand): nested queries are "challenging".
BIRD_DIFFICULTY = {"Simple": "simple", "Moderate": "moderate", "Complex": "moderate", "Highly Complex": "challenging"}
STYLES = {  # SynSQL question styles; each wraps the noun phrase a template builds
    "Formal": ("Please provide {np}.", "Could you report {np}?"),
    "Colloquial": ("Hey, can you tell me {np}?", "So what's {np}?"),
    "Imperative": ("Find {np}.", "Show {np}.", "List {np}."),
    "Interrogative": ("What is {np}?", "Which value is {np}?"),
    "Descriptive": ("I would like to know {np}, based on the records in the {db} database.",),
    "Concise": ("{NP}?",),
}
# UNKNOWN: share of training questions that carry evidence (SynSQL's `external_knowledge`). BIRD dev
# questions all do; a pool without any left the tiny base model unable to read an evidence line.
TRAIN_EVIDENCE_SHARE = 0.5
MULTI_ROUTE_WEIGHT = 6  # UNKNOWN: attributes with several routes are drawn this much more often
MAX_RESULT_ROWS = 50  # prefer small, well-defined gold results


@dataclass(frozen=True)
class TinyWorld:
    root: Path

    @property
    def manifest(self) -> Path: return self.root / "manifest.json"
    @property
    def tables_json(self) -> Path: return self.root / "tables.json"
    @property
    def routes_json(self) -> Path: return self.root / "routes.json"
    @property
    def train_json(self) -> Path: return self.root / "train" / "data.json"
    @property
    def train_tables(self) -> Path: return self.root / "train" / "tables.json"
    @property
    def train_db_root(self) -> Path: return self.root / "train" / "databases"
    @property
    def dev_json(self) -> Path: return self.root / "dev" / "dev.json"
    @property
    def dev_tables(self) -> Path: return self.root / "dev" / "dev_tables.json"
    @property
    def dev_db_root(self) -> Path: return self.root / "dev" / "dev_databases"

    def db_path(self, db_id: str, split: str = "dev") -> Path:
        root = self.dev_db_root if split == "dev" else self.train_db_root
        return root / db_id / f"{db_id}.sqlite"

    def read_manifest(self) -> dict:
        return json.loads(self.manifest.read_text(encoding="utf-8"))


# ---------------------------------------------------------------------------------------------
# the eight databases

REF_YEAR = 2024  # `age` columns hold the age in this year (age = 2024 - birth_year)
FIRST = """Alice Amir Ana Ben Carla Chen David Diego Elena Emma Farah Felix Grace Hana Hugo Ines Ivan Jack
Jana Jonas Kai Kara Leo Lina Luca Maya Mei Nina Noah Olga Omar Paula Pedro Priya Quinn Rosa Ravi Sara
Sofia Tariq Tom Uma Victor Vera Wei Yara Yusuf Zoe Aaron Bianca Cyril Dana Eli Freya Gus Helga Igor
Julia Kofi Lars""".split()
LAST = """Abbott Baker Costa Dalton Evans Fischer Garcia Hansen Ito Jensen Kowalski Larsen Moreau Novak
Okafor Patel Quinto Rossi Schmidt Tanaka Ueda Varga Weber Xu Yilmaz Zimmer Alvarez Brooks Chandra Dubois
Eriksen Ferreira Gupta Horvath Ibarra Jovanovic Kim Lopez Murphy Nakamura Olsen Petrov Quist Reyes
Silva Torres Ullman Vance Walsh Young Zhang Berg Castro Duarte Engel Fox Gomez Holm Iqbal Keller""".split()
CITIES = """Amsterdam Athens Barcelona Berlin Boston Chicago Denver Dublin Lisbon London Lyon Madrid Milan
Montreal Oslo Paris Prague Seattle Toronto Vienna""".split()
COUNTRIES = ["Brazil", "Canada", "France", "Germany", "India", "Italy", "Japan", "Kenya", "Mexico", "Norway",
             "Spain", "Sweden"]
ADJ = """Silent Golden Hidden Crimson Distant Frozen Gentle Hollow Iron Lucky Midnight Northern Quiet
Rapid Scarlet Shining Sunken Velvet Wild Amber Broken Burning Copper Crystal Dusty Emerald Fading
Glass Hungry Ivory Lonely Marble Misty Painted Restless Rusty Secret Stone Twisted Wandering""".split()
NOUN = """River Garden Harbor Mountain Lantern Forest Mirror Island Valley Tower Meadow Compass Bridge
Desert Ocean Orchard Castle Canyon Feather Horizon Journey Kingdom Letter Machine Window Shadow Signal
Storm Summer Thunder Voyage Winter Anchor Circle Echo Flame Planet Rain Road Song""".split()
GOODS = """Desk Lamp|Office Chair|Coffee Mug|Water Bottle|Backpack|Notebook|Headphones|Keyboard|Monitor
Stand|Table Fan|Wall Clock|Yoga Mat|Blender|Kettle|Toaster|Rain Jacket|Sneakers|Sunglasses|Umbrella|
Phone Case""".replace("\n", " ").split("|")


@dataclass(frozen=True)
class Col:
    name: str
    type: str  # BIRD column type: integer, real, text, date
    gen: tuple  # how values are drawn (see generate_rows)
    role: str = ""  # label, cat, num, date, or "" (keys and copies)
    phrase: str = ""  # readable name used in questions and tables.json
    fk: str = ""  # parent table (its first column is the key) when this is a foreign key
    link_phrase: str = ""  # how a question names the parent reached through this key
    desc: str = ""


@dataclass(frozen=True)
class Table:
    name: str
    singular: str
    plural: str
    rows: int
    cols: tuple[Col, ...]

    def col(self, name: str) -> Col:
        return next(c for c in self.cols if c.name == name)

    def links(self) -> list[Col]:
        """Foreign keys that are not copies (shortcut keys are routes, not links)."""
        return [c for c in self.cols if c.fk and c.gen[0] != "copy"]

    @property
    def label(self) -> Col:
        return next((c for c in self.cols if c.role == "label"), self.cols[0])


@dataclass(frozen=True)
class DbSpec:
    db_id: str
    dev_only: bool
    tables: tuple[Table, ...]

    def table(self, name: str) -> Table:
        return next(t for t in self.tables if t.name == name)


def C(name: str, type: str, gen: tuple, role: str = "", phrase: str = "", fk: str = "", link: str = "",
      desc: str = "") -> Col:
    return Col(name, type, gen, role, phrase, fk, link, desc)


def T(name: str, singular: str, plural: str, rows: int, *cols: Col) -> Table:
    return Table(name, singular, plural, rows, cols)


def _age(r: dict) -> int:
    return REF_YEAR - r["birth_year"]


ID, FK = ("seq",), ("fk",)
AGE = ("derived", f"{REF_YEAR} - {{birth_year}}", _age)
DB_SPECS: tuple[DbSpec, ...] = (
    DbSpec("school", False, (
        T("departments", "department", "departments", 12, C("dept_id", "integer", ID),
          C("dept_name", "text", ("from", ["Mathematics", "Physics", "Chemistry", "Biology", "History", "Literature",
            "Economics", "Computer Science", "Philosophy", "Music", "Art", "Geography"]), "label", "department name"),
          C("building", "text", ("choice", ["North Hall", "South Hall", "East Wing", "West Wing", "Main Building"]), "cat"),
          C("budget", "real", ("real", 50000, 900000), "num")),
        T("teachers", "teacher", "teachers", 120, C("teacher_id", "integer", ID),
          C("full_name", "text", ("person",), "label", "name"),
          C("dept_id", "integer", FK, fk="departments"),
          C("salary", "integer", ("int", 38000, 120000), "num"),
          C("hire_date", "date", ("date", 2000, 2023), "date", "hire date"),
          C("birth_year", "integer", ("int", 1955, 1995), "num", "birth year"),
          C("age", "integer", AGE, "num")),
        T("courses", "course", "courses", 150, C("course_id", "integer", ID),
          C("title", "text", ("title", ADJ, NOUN), "label"),
          C("dept_id", "integer", FK, fk="departments"),
          C("teacher_id", "integer", FK, fk="teachers"),
          C("credits", "integer", ("int", 1, 6), "num")),
        T("students", "student", "students", 800, C("student_id", "integer", ID),
          C("full_name", "text", ("person",), "label", "name"),
          C("home_city", "text", ("choice", CITIES), "cat", "home city"),
          C("birth_year", "integer", ("int", 1996, 2006), "num", "birth year"),
          C("age", "integer", AGE, "num"),
          C("gpa", "real", ("real", 1.5, 4.0), "num", "GPA")),
        T("enrollments", "enrollment", "enrollments", 2000, C("enrollment_id", "integer", ID),
          C("student_id", "integer", FK, fk="students"),
          C("course_id", "integer", FK, fk="courses"),
          C("dept_id", "integer", ("copy", "course_id", "dept_id"), fk="departments"),
          C("semester", "text", ("choice", ["Fall 2022", "Spring 2023", "Fall 2023", "Spring 2024"]), "cat"),
          C("grade", "text", ("choice", ["A", "B", "C", "D", "F"]), "cat"),
          C("score", "integer", ("int", 35, 100), "num")))),
    DbSpec("library", False, (
        T("authors", "author", "authors", 150, C("author_id", "integer", ID),
          C("author_name", "text", ("person",), "label", "author name"),
          C("nationality", "text", ("choice", COUNTRIES), "cat"),
          C("birth_year", "integer", ("int", 1900, 1990), "num", "birth year")),
        T("books", "book", "books", 600, C("book_id", "integer", ID),
          C("title", "text", ("title", ADJ, NOUN), "label"),
          C("author_id", "integer", FK, fk="authors"),
          C("genre", "text", ("choice", ["Fantasy", "Mystery", "Romance", "Science Fiction", "History", "Poetry",
                                         "Biography", "Thriller"]), "cat"),
          C("pages", "integer", ("int", 90, 900), "num", "page count"),
          C("publish_year", "integer", ("int", 1950, 2023), "num", "publication year"),
          C("price", "real", ("real", 5, 80), "num")),
        T("members", "member", "members", 400, C("member_id", "integer", ID),
          C("member_name", "text", ("person",), "label", "member name"),
          C("city", "text", ("choice", CITIES), "cat"),
          C("join_date", "date", ("date", 2015, 2024), "date", "join date"),
          C("membership", "text", ("choice", ["Basic", "Premium", "Student", "Senior"]), "cat", "membership type")),
        T("loans", "loan", "loans", 2000, C("loan_id", "integer", ID),
          C("book_id", "integer", FK, fk="books"),
          C("member_id", "integer", FK, fk="members", link="borrower"),
          C("loan_date", "date", ("date", 2020, 2024), "date", "loan date"),
          C("days_kept", "integer", ("int", 1, 60), "num", "number of days kept"),
          C("member_city", "text", ("copy", "member_id", "city"), phrase="member city"),
          C("book_genre", "text", ("copy", "book_id", "genre"), phrase="book genre")))),
    DbSpec("retail", False, (  # BIRD-style names: mixed case and spaces
        T("Customers", "customer", "customers", 400, C("CustomerID", "integer", ID),
          C("Customer Name", "text", ("person",), "label", "customer name"),
          C("City", "text", ("choice", CITIES), "cat", "city"),
          C("Segment", "text", ("choice", ["Consumer", "Corporate", "Home Office"]), "cat", "segment"),
          C("Signup Year", "integer", ("int", 2012, 2024), "num", "signup year")),
        T("Products", "product", "products", 200, C("ProductID", "integer", ID),
          C("Product Name", "text", ("title", ADJ, GOODS), "label", "product name"),
          C("Category", "text", ("choice", ["Office", "Kitchen", "Electronics", "Outdoor", "Apparel", "Home"]),
            "cat", "category"),
          C("Brand", "text", ("choice", ["Acme", "Northwind", "Contoso", "Globex", "Initech"]), "cat", "brand"),
          C("Unit Price", "real", ("real", 2, 500), "num", "unit price")),
        T("Orders", "order", "orders", 1200, C("OrderID", "integer", ID),
          C("CustomerID", "integer", FK, fk="Customers"),
          C("Order Date", "date", ("date", 2021, 2024), "date", "order date"),
          C("Channel", "text", ("choice", ["Online", "In Store", "Phone"]), "cat", "sales channel"),
          C("Customer City", "text", ("copy", "CustomerID", "City"), phrase="customer city")),
        T("OrderItems", "order item", "order items", 2000, C("ItemID", "integer", ID),
          C("OrderID", "integer", FK, fk="Orders"),
          C("ProductID", "integer", FK, fk="Products"),
          C("Quantity", "integer", ("int", 1, 10), "num", "quantity"),
          C("Unit Price", "real", ("copy", "ProductID", "Unit Price"), phrase="unit price"),
          C("Line Total", "real", ("derived", "{Quantity} * {Unit Price}",
                                   lambda r: round(r["Quantity"] * r["Unit Price"], 2)), "num", "line total")))),
    DbSpec("hospital", False, (
        T("departments", "department", "departments", 15, C("department_id", "integer", ID),
          C("department_name", "text", ("from", ["Cardiology", "Neurology", "Oncology", "Pediatrics", "Radiology",
            "Orthopedics", "Dermatology", "Emergency", "Psychiatry", "Urology", "Gastroenterology", "Nephrology",
            "Ophthalmology", "Endocrinology", "Rheumatology"]), "label", "department name"),
          C("floor", "integer", ("int", 1, 8), "num")),
        T("doctors", "doctor", "doctors", 90, C("doctor_id", "integer", ID),
          C("doctor_name", "text", ("person",), "label", "doctor name"),
          C("department_id", "integer", FK, fk="departments"),
          C("specialty", "text", ("choice", ["Surgery", "Internal Medicine", "Diagnostics", "Research", "Consulting"]),
            "cat"),
          C("years_experience", "integer", ("int", 1, 40), "num", "years of experience")),
        T("patients", "patient", "patients", 700, C("patient_id", "integer", ID),
          C("patient_name", "text", ("person",), "label", "patient name"),
          C("gender", "text", ("choice", ["F", "M"]), "cat"),
          C("birth_year", "integer", ("int", 1935, 2015), "num", "birth year"),
          C("age", "integer", AGE, "num"),
          C("city", "text", ("choice", CITIES), "cat"),
          C("blood_type", "text", ("choice", ["A+", "A-", "B+", "B-", "AB+", "O+", "O-"]), "cat", "blood type")),
        T("appointments", "appointment", "appointments", 2000, C("appointment_id", "integer", ID),
          C("patient_id", "integer", FK, fk="patients"),
          C("doctor_id", "integer", FK, fk="doctors"),
          C("department_id", "integer", ("copy", "doctor_id", "department_id"), fk="departments"),
          C("appointment_date", "date", ("date", 2021, 2024), "date", "appointment date"),
          C("fee", "real", ("real", 20, 400), "num"),
          C("diagnosis", "text", ("choice", ["Flu", "Fracture", "Migraine", "Hypertension", "Diabetes", "Asthma",
                                             "Allergy", "Checkup"]), "cat")))),
    DbSpec("airline", False, (
        T("airports", "airport", "airports", 20, C("airport_code", "text",
          ("from", ["AMS", "ATH", "BCN", "BER", "BOS", "ORD", "DEN", "DUB", "LIS", "LHR", "LYS", "MAD", "MXP", "YUL",
                    "OSL", "CDG", "PRG", "SEA", "YYZ", "VIE"])),
          C("city", "text", ("from", CITIES), "label"),
          C("country", "text", ("from", ["Netherlands", "Greece", "Spain", "Germany", "USA", "USA", "USA", "Ireland",
            "Portugal", "UK", "France", "Spain", "Italy", "Canada", "Norway", "France", "Czechia", "USA", "Canada",
            "Austria"]), "cat"),
          C("terminals", "integer", ("int", 1, 6), "num", "number of terminals")),
        T("aircraft", "aircraft", "aircraft", 60, C("aircraft_id", "integer", ID),
          C("tail_number", "text", ("code", "N{}TW", 100, 999), "label", "tail number"),
          C("model", "text", ("choice", ["A320", "A321", "A350", "B737", "B787", "E190"]), "cat"),
          C("seats", "integer", ("int", 90, 350), "num", "number of seats")),
        T("flights", "flight", "flights", 1000, C("flight_id", "integer", ID),
          C("flight_number", "text", ("code", "TW{}", 1000, 9999), "label", "flight number"),
          C("origin_code", "text", FK, fk="airports", link="origin airport"),
          C("aircraft_id", "integer", FK, fk="aircraft"),
          C("departure_date", "date", ("date", 2023, 2024), "date", "departure date"),
          C("distance_km", "integer", ("int", 200, 9000), "num", "distance in km"),
          C("origin_city", "text", ("copy", "origin_code", "city"), phrase="origin city")),
        T("bookings", "booking", "bookings", 2000, C("booking_id", "integer", ID),
          C("flight_id", "integer", FK, fk="flights"),
          C("passenger_name", "text", ("person",), "label", "passenger name"),
          C("fare_class", "text", ("choice", ["Economy", "Premium", "Business", "First"]), "cat", "fare class"),
          C("price", "real", ("real", 50, 1500), "num")))),
    DbSpec("football", False, (
        T("teams", "team", "teams", 20, C("team_id", "integer", ID),
          C("team_name", "text", ("from", [f"{c} {s}" for c, s in zip(CITIES, ["United", "Rovers", "Athletic",
            "City", "Wanderers", "FC", "Albion", "Rangers", "Sporting", "Town", "Olympique", "Real", "Calcio",
            "Impact", "Vikings", "Saint", "Dynamo", "Sounders", "Lions", "Austria"])]), "label", "team name"),
          C("city", "text", ("from", CITIES), "cat"),
          C("founded_year", "integer", ("int", 1870, 1990), "num", "founding year"),
          C("stadium_capacity", "integer", ("int", 8000, 90000), "num", "stadium capacity")),
        T("players", "player", "players", 500, C("player_id", "integer", ID),
          C("player_name", "text", ("person",), "label", "player name"),
          C("team_id", "integer", FK, fk="teams"),
          C("position", "text", ("choice", ["Goalkeeper", "Defender", "Midfielder", "Forward"]), "cat"),
          C("nationality", "text", ("choice", COUNTRIES), "cat"),
          C("birth_year", "integer", ("int", 1986, 2006), "num", "birth year"),
          C("age", "integer", AGE, "num"),
          C("market_value", "real", ("real", 0.5, 120), "num", "market value in millions")),
        T("matches", "match", "matches", 380, C("match_id", "integer", ID),
          C("home_team_id", "integer", FK, fk="teams", link="home team"),
          C("match_date", "date", ("date", 2023, 2024), "date", "match date"),
          C("home_goals", "integer", ("int", 0, 5), "num", "home goals"),
          C("away_goals", "integer", ("int", 0, 4), "num", "away goals"),
          C("total_goals", "integer", ("derived", "{home_goals} + {away_goals}",
                                       lambda r: r["home_goals"] + r["away_goals"]), "num", "total goals"),
          C("attendance", "integer", ("int", 5000, 90000), "num")),
        T("goals", "goal", "goals", 900, C("goal_id", "integer", ID),
          C("match_id", "integer", FK, fk="matches"),
          C("player_id", "integer", FK, fk="players", link="scorer"),
          C("team_id", "integer", ("copy", "player_id", "team_id"), fk="teams"),
          C("minute", "integer", ("int", 1, 90), "num")))),
    DbSpec("music", True, (
        T("artists", "artist", "artists", 150, C("artist_id", "integer", ID),
          C("artist_name", "text", ("title", ["The " + a for a in ADJ], NOUN), "label", "artist name"),
          C("country", "text", ("choice", COUNTRIES), "cat"),
          C("formed_year", "integer", ("int", 1960, 2020), "num", "year formed")),
        T("albums", "album", "albums", 400, C("album_id", "integer", ID),
          C("album_title", "text", ("title", ADJ, NOUN), "label", "album title"),
          C("artist_id", "integer", FK, fk="artists"),
          C("release_year", "integer", ("int", 1965, 2024), "num", "release year"),
          C("record_label", "text", ("choice", ["Blue Note", "Sunrise", "Harbor Records", "Echo House"]), "cat",
            "record label")),
        T("tracks", "track", "tracks", 1500, C("track_id", "integer", ID),
          C("track_title", "text", ("title", ADJ, NOUN), "label", "track title"),
          C("album_id", "integer", FK, fk="albums"),
          C("artist_id", "integer", ("copy", "album_id", "artist_id"), fk="artists"),
          C("genre", "text", ("choice", ["Rock", "Jazz", "Pop", "Folk", "Electronic", "Blues"]), "cat"),
          C("duration_sec", "integer", ("int", 120, 420), "num", "duration in seconds"),
          C("play_count", "integer", ("int", 100, 900000), "num", "play count")))),
    DbSpec("hotel", True, (
        T("hotels", "hotel", "hotels", 40, C("hotel_id", "integer", ID),
          C("hotel_name", "text", ("title", ["Hotel " + a for a in ADJ], NOUN), "label", "hotel name"),
          C("city", "text", ("choice", CITIES), "cat"),
          C("stars", "integer", ("int", 1, 5), "num", "star rating")),
        T("rooms", "room", "rooms", 600, C("room_id", "integer", ID),
          C("hotel_id", "integer", FK, fk="hotels"),
          C("room_type", "text", ("choice", ["Single", "Double", "Suite", "Family"]), "cat", "room type"),
          C("nightly_rate", "real", ("real", 40, 600), "num", "nightly rate")),
        T("guests", "guest", "guests", 700, C("guest_id", "integer", ID),
          C("guest_name", "text", ("person",), "label", "guest name"),
          C("country", "text", ("choice", COUNTRIES), "cat"),
          C("birth_year", "integer", ("int", 1940, 2005), "num", "birth year"),
          C("age", "integer", AGE, "num")),
        T("stays", "stay", "stays", 2000, C("stay_id", "integer", ID),
          C("guest_id", "integer", FK, fk="guests"),
          C("room_id", "integer", FK, fk="rooms"),
          C("hotel_id", "integer", ("copy", "room_id", "hotel_id"), fk="hotels"),
          C("check_in", "date", ("date", 2022, 2024), "date", "check-in date"),
          C("nights", "integer", ("int", 1, 14), "num", "number of nights"),
          C("nightly_rate", "real", ("copy", "room_id", "nightly_rate"), phrase="nightly rate"),
          C("total_cost", "real", ("derived", "{nights} * {nightly_rate}",
                                   lambda r: round(r["nights"] * r["nightly_rate"], 2)), "num", "total cost")))),
)


def generate_rows(db: DbSpec, seed: int) -> dict[str, list[dict]]:
    """Rows of every table, parents first; copies and derived columns are filled from them."""
    rng = random.Random(f"{seed}:{db.db_id}")
    rows: dict[str, list[dict]] = {}
    for t in db.tables:
        n = t.rows
        by_key = {name: {r[db.table(name).cols[0].name]: r for r in rows[name]} for name in rows}
        columns: dict[str, list] = {}
        for c in t.cols:
            kind = c.gen[0]
            if kind == "seq":
                columns[c.name] = list(range(1, n + 1))
            elif kind == "person":
                columns[c.name] = [f"{a} {b}" for a, b in rng.sample(sorted(itertools.product(FIRST, LAST)), n)]
            elif kind == "title":
                columns[c.name] = [f"{a} {b}" for a, b in rng.sample(sorted(itertools.product(c.gen[1], c.gen[2])), n)]
            elif kind == "code":
                columns[c.name] = [c.gen[1].format(k) for k in rng.sample(range(c.gen[2], c.gen[3] + 1), n)]
            elif kind == "from":
                columns[c.name] = list(c.gen[1][:n])
            elif kind == "choice":
                weights = [1.0 + 3 * rng.random() for _ in c.gen[1]]  # uneven, so "the most" is well defined
                columns[c.name] = rng.choices(c.gen[1], weights, k=n)
            elif kind == "int":
                columns[c.name] = [rng.randint(c.gen[1], c.gen[2]) for _ in range(n)]
            elif kind == "real":
                columns[c.name] = [round(rng.uniform(c.gen[1], c.gen[2]), 2) for _ in range(n)]
            elif kind == "date":
                start, days = datetime.date(c.gen[1], 1, 1), (c.gen[2] - c.gen[1] + 1) * 365
                columns[c.name] = [(start + datetime.timedelta(days=rng.randrange(days))).isoformat() for _ in range(n)]
            elif kind == "fk":
                keys = sorted(by_key[c.fk])
                weights = [0.05 + rng.random() ** 2 for _ in keys]  # skewed: some parents are busier
                columns[c.name] = rng.choices(keys, weights, k=n)
        table_rows = [{name: columns[name][i] for name in columns} for i in range(n)]
        for c in t.cols:  # copies and derived values, in column order
            if c.gen[0] == "copy":
                parent = db.table(t.col(c.gen[1]).fk).name
                for r in table_rows:
                    r[c.name] = by_key[parent][r[c.gen[1]]][c.gen[2]]
            elif c.gen[0] == "derived":
                for r in table_rows:
                    r[c.name] = c.gen[2](r)
        rows[t.name] = table_rows
    return rows


# ---------------------------------------------------------------------------------------------
# databases


def _create_sqlite(path: Path, db: DbSpec, rows: dict[str, list[dict]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    con = sqlite3.connect(path)
    con.execute("PRAGMA page_size = 4096")  # fixed layout, so the same rows give the same bytes
    with con:
        for t in db.tables:
            lines = [f"  {qi(c.name)} {c.type.upper()}" for c in t.cols]
            lines.append(f"  PRIMARY KEY ({qi(t.cols[0].name)})")
            lines += [f"  FOREIGN KEY ({qi(c.name)}) REFERENCES {qi(c.fk)}({qi(db.table(c.fk).cols[0].name)})"
                      for c in t.cols if c.fk]
            con.execute(f"CREATE TABLE {qi(t.name)} (\n" + ",\n".join(lines) + "\n)")
            marks = ", ".join("?" for _ in t.cols)
            con.executemany(f"INSERT INTO {qi(t.name)} VALUES ({marks})",
                            [tuple(r[c.name] for c in t.cols) for r in rows[t.name]])
    con.close()


def _readable(name: str) -> str:
    return re.sub(r"(?<=[a-z])(?=[A-Z])", " ", name).replace("_", " ").lower()


def tables_entry(db: DbSpec) -> dict:
    """The Spider/BIRD tables.json entry of one database."""
    names, readable, types, pks, fks = [[-1, "*"]], [[-1, "*"]], ["text"], [], []
    index: dict[tuple[str, str], int] = {}
    for ti, t in enumerate(db.tables):
        for c in t.cols:
            index[(t.name, c.name)] = len(names)
            names.append([ti, c.name])
            readable.append([ti, c.phrase or _readable(c.name)])
            types.append(c.type)
        pks.append(index[(t.name, t.cols[0].name)])
    for t in db.tables:
        for c in t.cols:
            if c.fk:
                fks.append([index[(t.name, c.name)], index[(c.fk, db.table(c.fk).cols[0].name)]])
    return {"db_id": db.db_id, "table_names": [_readable(t.name) for t in db.tables],
            "table_names_original": [t.name for t in db.tables], "column_names": readable,
            "column_names_original": names, "column_types": types, "primary_keys": pks, "foreign_keys": fks}


def _description_csv(db: DbSpec, t: Table) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["original_column_name", "column_name", "column_description", "data_format", "value_description"])
    for c in t.cols:
        kind = c.gen[0]
        if kind == "copy":
            note = f"copy of {c.gen[2]} of the {db.table(t.col(c.gen[1]).fk).singular} in {c.gen[1]}"
        elif kind == "derived":
            note = "computed as " + re.sub(r"\{([^}]+)\}", r"\1", c.gen[1])
        elif kind == "choice" and c.type == "text":
            note = "one of: " + ", ".join(c.gen[1])
        else:
            note = ""
        w.writerow([c.name, c.phrase or _readable(c.name), c.desc or c.phrase or _readable(c.name), c.type, note])
    return buf.getvalue()


# ---------------------------------------------------------------------------------------------
# attributes: what a question can talk about, each with every route that reads it


@dataclass(frozen=True)
class Join:
    src: str
    src_col: str
    dst: str
    dst_col: str


@dataclass(frozen=True)
class Route:
    joins: tuple[Join, ...]
    table: str
    col: str
    use_expr: bool = False  # a derived column written as its expression


@dataclass(frozen=True)
class Attr:
    anchor: str  # the table the question counts or lists
    role: str  # label, cat, num or date
    phrase: str
    routes: tuple[Route, ...]
    owner: str  # table that owns the leaf column on the first route


class Recorder:
    """Renders column references and records the column set they make (module doc)."""

    def __init__(self, db: DbSpec, bare: bool = False) -> None:
        self.db, self.bare, self.used, self.tables = db, bare, set(), set()

    def __call__(self, table: str, col: str) -> str:
        self.used.add(f"{table}.{col}")
        return col if self.bare else f"{qi(table)}.{qi(col)}"

    def from_table(self, table: str) -> str:
        self.tables.add(table)
        return qi(table)

    def columns(self) -> list[str]:
        cols = set(self.used)
        for t in self.tables:  # kit rule: a table read through `*` only stands as its primary key
            if not any(c.startswith(t + ".") for c in cols):
                cols.add(f"{t}.{self.db.table(t).cols[0].name}")
        return sorted(cols)


def expr(q: Recorder, r: Route) -> str:
    col = q.db.table(r.table).col(r.col)
    if r.use_expr:
        return "(" + re.sub(r"\{([^}]+)\}", lambda m: q(r.table, m.group(1)), col.gen[1]) + ")"
    return q(r.table, r.col)


def from_clause(q: Recorder, anchor: str, routes: list[Route]) -> str | None:
    """FROM anchor plus the joins the routes need; None when two routes reach a table differently."""
    seen: dict[str, Join] = {}
    order: list[Join] = []
    for r in routes:
        for j in r.joins:
            if j.dst == anchor or seen.get(j.dst, j) != j:
                return None
            if j.dst not in seen:
                seen[j.dst] = j
                order.append(j)
    text = q.from_table(anchor)
    for j in order:
        text += f" JOIN {q.from_table(j.dst)} ON {q(j.src, j.src_col)} = {q(j.dst, j.dst_col)}"
    return text


def _leaf_routes(db: DbSpec, joins: tuple[Join, ...], table: str, c: Col) -> list[Route]:
    routes = [Route(joins, table, c.name)]
    if c.gen[0] == "derived":
        routes.append(Route(joins, table, c.name, True))
    return routes


def _linked_phrase(via: str, parent: Table, c: Col) -> str:
    """'customer city'; 'borrower name' rather than 'borrower member name'."""
    phrase = c.phrase or _readable(c.name)
    if phrase.startswith(parent.singular + " "):
        phrase = phrase[len(parent.singular) + 1:]
    return f"{via} {phrase}"


def attributes(db: DbSpec, anchor: str) -> list[Attr]:
    """Local columns, parent columns one FK away (with the anchor's copy, if any) and two FKs away
    (with the shortcut FK, if any). Copy and shortcut columns are routes, not attributes."""
    t = db.table(anchor)
    out = [Attr(anchor, c.role, c.phrase or _readable(c.name), tuple(_leaf_routes(db, (), anchor, c)), anchor)
           for c in t.cols if c.role in ("label", "cat", "num", "date") and c.gen[0] != "copy"]
    for fk in t.links():
        p = db.table(fk.fk)
        j1 = Join(anchor, fk.name, p.name, p.cols[0].name)
        for pc in p.cols:
            if pc.role not in ("label", "cat", "num", "date") or pc.gen[0] == "copy":
                continue
            routes = _leaf_routes(db, (j1,), p.name, pc)
            routes += [Route((), anchor, c.name) for c in t.cols if c.gen[:3] == ("copy", fk.name, pc.name)]
            out.append(Attr(anchor, pc.role, _linked_phrase(fk.link_phrase or p.singular, p, pc), tuple(routes), p.name))
        for fk2 in p.links():
            g = db.table(fk2.fk)
            if g.name in (anchor, p.name):
                continue
            j2 = Join(p.name, fk2.name, g.name, g.cols[0].name)
            shortcut = [c for c in t.cols if c.fk == g.name and c.gen[:3] == ("copy", fk.name, fk2.name)]
            for gc in g.cols:
                if gc.role not in ("label", "cat"):
                    continue
                routes = [Route((j1, j2), g.name, gc.name)]
                routes += [Route((Join(anchor, s.name, g.name, g.cols[0].name),), g.name, gc.name) for s in shortcut]
                out.append(Attr(anchor, gc.role, _linked_phrase(g.singular, g, gc), tuple(routes), g.name))
    return out


# ---------------------------------------------------------------------------------------------
# question templates: each returns a candidate whose SQL can be rendered through every route


@dataclass
class Cand:
    base: int  # index into LEVELS before joins are counted
    np: str  # the noun phrase the question style wraps
    attrs: list[Attr]
    render: Callable[[Recorder, tuple[int, ...]], str | None]
    hints: list[str]  # evidence parts; {i} is attribute i as the gold route writes it
    probe: Callable[[Recorder, tuple[int, ...]], str | None] | None = None  # top-2 sort keys; must differ
    fixed_level: bool = False


class DbContext:
    """One database open for question generation, with its attributes and cached value lists."""

    def __init__(self, db: DbSpec, con: sqlite3.Connection) -> None:
        self.db, self.con = db, con
        self.attrs = {t.name: attributes(db, t.name) for t in db.tables}
        self._values: dict[tuple[str, str, Route], list] = {}

    def pick(self, rng: random.Random, anchor: str, roles: tuple[str, ...], exclude: tuple[Attr, ...] = (),
             hops: int | None = None) -> Attr | None:
        pool = [a for a in self.attrs[anchor] if a.role in roles and a not in exclude
                and (hops is None or len(a.routes[0].joins) == hops)]
        if not pool:
            return None
        return rng.choices(pool, [MULTI_ROUTE_WEIGHT if len(a.routes) > 1 else 1 for a in pool])[0]

    def values(self, a: Attr) -> list:
        key = (a.anchor, a.phrase, a.routes[0])
        if key not in self._values:
            q = Recorder(self.db)
            sql = f"SELECT {expr(q, a.routes[0])} FROM {from_clause(q, a.anchor, [a.routes[0]])}"
            self._values[key] = [v for (v,) in self.con.execute(sql) if v is not None]
        return self._values[key]

    def leaf_type(self, a: Attr) -> str:
        r = a.routes[0]
        return self.db.table(r.table).col(r.col).type


def lit(v: object) -> str:
    return "'" + v.replace("'", "''") + "'" if isinstance(v, str) else str(v)


def _plural(phrase: str) -> str:
    return phrase if phrase.endswith("s") else phrase + "s"


def _threshold(ctx: DbContext, a: Attr, high: bool, rank: int) -> str | int | float:
    """A cut-off near the top (or bottom) of the values; numbers are rounded so the question can
    show them as the SQL writes them."""
    vals = sorted(set(ctx.values(a)), reverse=high)
    v = vals[min(rank, len(vals) - 1)]
    if isinstance(v, float):
        return round(v, 1) if max(vals) - min(vals) < 50 else int(v)
    return v


def _cat(a: Attr, v: object, i: int) -> tuple[str, str]:
    return f"whose {a.phrase} is {v}", f"{v} refers to {{{i}}} = {lit(v)}"


def _cmp(a: Attr, op: str, v: object, i: int, evidence: bool) -> tuple[str, str]:
    """Phrase and evidence for `a op v`; a question with evidence says 'high'/'low' and leaves the
    number to the evidence (BIRD's style), one without names the number."""
    if a.role == "date":
        word = "later" if op == ">" else "earlier"
        return f"whose {a.phrase} is {word} than {v}", f"{word} than {v} refers to {{{i}}} {op} {lit(v)}"
    if evidence:
        word = "high" if op == ">" else "low"
        return f"with a {word} {a.phrase}", f"{word} {a.phrase} refers to {{{i}}} {op} {lit(v)}"
    word = "greater" if op == ">" else "less"
    return f"whose {a.phrase} is {word} than {v}", f"{a.phrase} refers to {{{i}}}"


AGG_WORDS = {"AVG": "average", "MAX": "maximum", "MIN": "minimum", "SUM": "total"}


def _sql(q: Recorder, anchor: str, attrs: list[Attr], ch: tuple[int, ...]) -> tuple[str | None, list[str]]:
    routes = [a.routes[i] for a, i in zip(attrs, ch)]
    fr = from_clause(q, anchor, routes)
    return fr, ([expr(q, r) for r in routes] if fr else [])


def t_count(ctx: DbContext, rng: random.Random, evidence: bool) -> Cand | None:
    t = rng.choice(ctx.db.tables)
    a = ctx.pick(rng, t.name, ("cat", "label"))
    if a is None:
        return None
    v = rng.choice(ctx.values(a))
    phrase, hint = _cat(a, v, 0)

    def render(q: Recorder, ch: tuple[int, ...]) -> str | None:
        fr, exprs = _sql(q, t.name, [a], ch)
        return fr and f"SELECT COUNT(*) FROM {fr} WHERE {exprs[0]} = {lit(v)}"
    return Cand(0, f"the number of {t.plural} {phrase}", [a], render, [hint])


def t_list(ctx: DbContext, rng: random.Random, evidence: bool) -> Cand | None:
    t = rng.choice(ctx.db.tables)
    lab = t.label
    a = ctx.pick(rng, t.name, ("num", "date"))
    if a is None:
        return None
    op = rng.choice([">", "<"])
    v = _threshold(ctx, a, op == ">", rng.randint(2, 6))
    phrase, hint = _cmp(a, op, v, 0, evidence)

    def render(q: Recorder, ch: tuple[int, ...]) -> str | None:
        fr, exprs = _sql(q, t.name, [a], ch)
        return fr and f"SELECT {q(t.name, lab.name)} FROM {fr} WHERE {exprs[0]} {op} {lit(v)}"
    return Cand(0, f"the {_plural(lab.phrase or _readable(lab.name))} of {t.plural} {phrase}", [a], render, [hint])


def t_lookup(ctx: DbContext, rng: random.Random, evidence: bool) -> Cand | None:
    t = rng.choice(ctx.db.tables)
    lab = t.label
    if lab.role != "label":
        return None
    a = ctx.pick(rng, t.name, ("cat", "num", "date", "label"), exclude=tuple(
        x for x in ctx.attrs[t.name] if x.owner == t.name and x.routes[0].col == lab.name))
    if a is None:
        return None
    x = rng.choice([r[0] for r in ctx.con.execute(f"SELECT {qi(lab.name)} FROM {qi(t.name)}")])

    def render(q: Recorder, ch: tuple[int, ...]) -> str | None:
        fr, exprs = _sql(q, t.name, [a], ch)
        return fr and f"SELECT {exprs[0]} FROM {fr} WHERE {q(t.name, lab.name)} = {lit(x)}"
    return Cand(0, f"the {a.phrase} of the {t.singular} {x}", [a], render, [f"{a.phrase} refers to {{0}}"])


def _agg(ctx: DbContext, rng: random.Random, evidence: bool, filtered: bool) -> Cand | None:
    t = rng.choice(ctx.db.tables)
    a = ctx.pick(rng, t.name, ("num",))
    b = ctx.pick(rng, t.name, ("cat",), exclude=(a,)) if filtered else None
    if a is None or (filtered and b is None):
        return None
    fn = rng.choice(sorted(AGG_WORDS))
    hints = [f"{AGG_WORDS[fn]} {a.phrase} refers to {fn}({{0}})"]
    where, v = "", None
    if b is not None:
        v = rng.choice(ctx.values(b))
        phrase, hint = _cat(b, v, 1)
        where, hints = " " + phrase, hints + [hint]
    attrs = [a] + ([b] if b else [])

    def render(q: Recorder, ch: tuple[int, ...]) -> str | None:
        fr, exprs = _sql(q, t.name, attrs, ch)
        if not fr:
            return None
        cond = f" WHERE {exprs[1]} = {lit(v)}" if b else ""
        return f"SELECT {fn}({exprs[0]}) FROM {fr}{cond}"
    return Cand(1 if b else 0, f"the {AGG_WORDS[fn]} {a.phrase} of {t.plural}{where}", attrs, render, hints)


def t_agg(ctx: DbContext, rng: random.Random, evidence: bool) -> Cand | None:
    return _agg(ctx, rng, evidence, False)


def t_agg_where(ctx: DbContext, rng: random.Random, evidence: bool) -> Cand | None:
    return _agg(ctx, rng, evidence, True)


def t_top(ctx: DbContext, rng: random.Random, evidence: bool) -> Cand | None:
    t = rng.choice(ctx.db.tables)
    lab = t.label
    a = ctx.pick(rng, t.name, ("num",))
    if a is None:
        return None
    high = rng.random() < 0.6
    order = "DESC" if high else "ASC"

    def render(q: Recorder, ch: tuple[int, ...], probe: bool = False) -> str | None:
        fr, exprs = _sql(q, t.name, [a], ch)
        if not fr:
            return None
        what, n = (exprs[0], 2) if probe else (q(t.name, lab.name), 1)
        return f"SELECT {what} FROM {fr} ORDER BY {exprs[0]} {order} LIMIT {n}"
    word = "highest" if high else "lowest"
    return Cand(1, f"the {lab.phrase or _readable(lab.name)} of the {t.singular} with the {word} {a.phrase}", [a],
                render, [f"{word} {a.phrase} refers to {'MAX' if high else 'MIN'}({{0}})"],
                probe=lambda q, ch: render(q, ch, True))


def t_group_top(ctx: DbContext, rng: random.Random, evidence: bool) -> Cand | None:
    t = rng.choice(ctx.db.tables)
    a = ctx.pick(rng, t.name, ("cat",))
    if a is None:
        return None

    def render(q: Recorder, ch: tuple[int, ...], probe: bool = False) -> str | None:
        fr, exprs = _sql(q, t.name, [a], ch)
        if not fr:
            return None
        what, n = ("COUNT(*)", 2) if probe else (exprs[0], 1)
        return f"SELECT {what} FROM {fr} GROUP BY {exprs[0]} ORDER BY COUNT(*) DESC LIMIT {n}"
    return Cand(1, f"the {a.phrase} with the most {t.plural}", [a], render, [f"{a.phrase} refers to {{0}}"],
                probe=lambda q, ch: render(q, ch, True))


def t_group_agg(ctx: DbContext, rng: random.Random, evidence: bool) -> Cand | None:
    t = rng.choice(ctx.db.tables)
    a = ctx.pick(rng, t.name, ("cat",))
    b = ctx.pick(rng, t.name, ("num",))
    if a is None or b is None or len(set(ctx.values(a))) > 20:
        return None
    fn = rng.choice(sorted(AGG_WORDS))

    def render(q: Recorder, ch: tuple[int, ...]) -> str | None:
        fr, exprs = _sql(q, t.name, [a, b], ch)
        return fr and f"SELECT {exprs[0]}, {fn}({exprs[1]}) FROM {fr} GROUP BY {exprs[0]}"
    return Cand(1, f"the {AGG_WORDS[fn]} {b.phrase} of {t.plural} for each {a.phrase}", [a, b], render,
                [f"{AGG_WORDS[fn]} {b.phrase} refers to {fn}({{1}})"])


def t_count2(ctx: DbContext, rng: random.Random, evidence: bool) -> Cand | None:
    t = rng.choice(ctx.db.tables)
    a = ctx.pick(rng, t.name, ("cat",))
    b = ctx.pick(rng, t.name, ("num", "date"))
    if a is None or b is None:
        return None
    v = rng.choice(ctx.values(a))
    op = rng.choice([">", "<"])
    w = _threshold(ctx, b, op == ">", len(set(ctx.values(b))) // rng.randint(3, 6))
    p1, h1 = _cat(a, v, 0)
    p2, h2 = _cmp(b, op, w, 1, evidence)

    def render(q: Recorder, ch: tuple[int, ...]) -> str | None:
        fr, exprs = _sql(q, t.name, [a, b], ch)
        return fr and f"SELECT COUNT(*) FROM {fr} WHERE {exprs[0]} = {lit(v)} AND {exprs[1]} {op} {lit(w)}"
    return Cand(1, f"the number of {t.plural} {p1} and {p2}", [a, b], render, [h1, h2])


def _parent_label(ctx: DbContext, rng: random.Random) -> tuple[Table, Attr, Table, str] | None:
    t = rng.choice(ctx.db.tables)
    a = ctx.pick(rng, t.name, ("label",), hops=1)
    if a is None:
        return None
    return t, a, ctx.db.table(a.owner), a.routes[0].joins[0].src_col


def t_having(ctx: DbContext, rng: random.Random, evidence: bool) -> Cand | None:
    found = _parent_label(ctx, rng)
    if found is None:
        return None
    t, a, p, fk = found
    counts = [n for (n,) in ctx.con.execute(
        f"SELECT COUNT(*) FROM {qi(t.name)} GROUP BY {qi(fk)} ORDER BY 1 DESC")]
    n = counts[min(rng.randint(1, 5), len(counts) - 1)]

    def render(q: Recorder, ch: tuple[int, ...]) -> str | None:
        fr, exprs = _sql(q, t.name, [a], ch)
        return fr and f"SELECT {exprs[0]} FROM {fr} GROUP BY {q(t.name, fk)} HAVING COUNT(*) > {n}"
    return Cand(2, f"the {_plural(a.phrase)} of {p.plural} that have more than {n} {t.plural}", [a], render,
                [f"more than {n} {t.plural} refers to COUNT(*) > {n}"])


def t_top_parent(ctx: DbContext, rng: random.Random, evidence: bool) -> Cand | None:
    found = _parent_label(ctx, rng)
    if found is None:
        return None
    t, a, p, fk = found
    b = ctx.pick(rng, t.name, ("num",), hops=0)
    if b is None:
        return None

    def render(q: Recorder, ch: tuple[int, ...], probe: bool = False) -> str | None:
        fr, exprs = _sql(q, t.name, [a, b], ch)
        if not fr:
            return None
        what, k = (f"SUM({exprs[1]})", 2) if probe else (exprs[0], 1)
        return f"SELECT {what} FROM {fr} GROUP BY {q(t.name, fk)} ORDER BY SUM({exprs[1]}) DESC LIMIT {k}"
    total = b.phrase if b.phrase.startswith("total ") else "total " + b.phrase
    return Cand(2, f"the {a.phrase} of the {p.singular} whose {t.plural} have the highest {total}",
                [a, b], render, [f"highest {total} refers to MAX(SUM({{1}}))"],
                probe=lambda q, ch: render(q, ch, True))


def t_above_avg(ctx: DbContext, rng: random.Random, evidence: bool) -> Cand | None:
    t = rng.choice(ctx.db.tables)
    a = ctx.pick(rng, t.name, ("num",))
    b = ctx.pick(rng, t.name, ("cat",))
    if a is None or b is None:
        return None
    v = rng.choice(ctx.values(b))
    phrase, hint = _cat(b, v, 1)

    def render(q: Recorder, ch: tuple[int, ...]) -> str | None:
        fr, exprs = _sql(q, t.name, [a, b], ch)
        inner, (e_in,) = _sql(q, t.name, [a], ch[:1]) if fr else (None, [None])
        return fr and inner and (f"SELECT COUNT(*) FROM {fr} WHERE {exprs[1]} = {lit(v)} AND {exprs[0]} > "
                                 f"(SELECT AVG({e_in}) FROM {inner})")
    return Cand(3, f"the number of {t.plural} {phrase} and whose {a.phrase} is above the average {a.phrase} "
                   f"of all {t.plural}", [a, b], render, [hint, f"average {a.phrase} refers to AVG({{0}})"],
                fixed_level=True)


def _child_link(ctx: DbContext, rng: random.Random) -> tuple[Table, Col, Table] | None:
    t = rng.choice(ctx.db.tables)
    links = t.links()
    if not links:
        return None
    fk = rng.choice(links)
    return t, fk, ctx.db.table(fk.fk)


def t_not_in(ctx: DbContext, rng: random.Random, evidence: bool) -> Cand | None:
    found = _child_link(ctx, rng)
    if found is None:
        return None
    t, fk, p = found
    a = ctx.pick(rng, t.name, ("cat",))
    if a is None or a.owner == p.name:
        return None
    v = rng.choice(ctx.values(a))
    phrase, hint = _cat(a, v, 0)

    def render(q: Recorder, ch: tuple[int, ...]) -> str | None:
        fr, exprs = _sql(q, t.name, [a], ch)
        return fr and (f"SELECT COUNT(*) FROM {q.from_table(p.name)} WHERE {q(p.name, p.cols[0].name)} NOT IN "
                       f"(SELECT {q(t.name, fk.name)} FROM {fr} WHERE {exprs[0]} = {lit(v)})")
    return Cand(3, f"the number of {p.plural} that have no {t.plural} {phrase}", [a], render, [hint], fixed_level=True)


def t_cte(ctx: DbContext, rng: random.Random, evidence: bool) -> Cand | None:
    found = _child_link(ctx, rng)
    if found is None:
        return None
    t, fk, p = found
    a = ctx.pick(rng, t.name, ("cat",))
    if a is None:
        return None
    v = rng.choice(ctx.values(a))
    phrase, hint = _cat(a, v, 0)

    def render(q: Recorder, ch: tuple[int, ...]) -> str | None:
        fr, exprs = _sql(q, t.name, [a], ch)
        return fr and (f"WITH per AS (SELECT {q(t.name, fk.name)} AS k, COUNT(*) AS n FROM {fr} WHERE {exprs[0]} = "
                       f"{lit(v)} GROUP BY {q(t.name, fk.name)}) SELECT COUNT(*) FROM per WHERE n > "
                       f"(SELECT AVG(n) FROM per)")
    return Cand(3, f"the number of {p.plural} with more {t.plural} {phrase} than the average {p.singular} has",
                [a], render, [hint], fixed_level=True)


def t_max_parent(ctx: DbContext, rng: random.Random, evidence: bool) -> Cand | None:
    found = _child_link(ctx, rng)
    if found is None:
        return None
    t, fk, p = found
    a = ctx.pick(rng, p.name, ("num",), hops=0)
    if a is None:
        return None
    pk = p.cols[0].name

    def render(q: Recorder, ch: tuple[int, ...], probe: bool = False) -> str | None:
        fr, exprs = _sql(q, p.name, [a], ch)
        if probe:
            return f"SELECT {exprs[0]} FROM {fr} ORDER BY {exprs[0]} DESC LIMIT 2"
        return (f"SELECT COUNT(*) FROM {q.from_table(t.name)} WHERE {q(t.name, fk.name)} = "
                f"(SELECT {q(p.name, pk)} FROM {fr} ORDER BY {exprs[0]} DESC LIMIT 1)")
    via = fk.link_phrase or p.singular
    return Cand(3, f"the number of {t.plural} whose {via} is the {p.singular} with the highest {a.phrase}", [a],
                render, [f"highest {a.phrase} refers to MAX({{0}})"], probe=lambda q, ch: render(q, ch, True),
                fixed_level=True)


def t_diff(ctx: DbContext, rng: random.Random, evidence: bool) -> Cand | None:
    t = rng.choice(ctx.db.tables)
    a = ctx.pick(rng, t.name, ("cat",))
    if a is None:
        return None
    options = sorted(set(ctx.values(a)))
    if len(options) < 2:
        return None
    v1, v2 = rng.sample(options, 2)

    def render(q: Recorder, ch: tuple[int, ...]) -> str | None:
        parts = []
        for v in (v1, v2):
            fr, exprs = _sql(q, t.name, [a], ch)
            if not fr:
                return None
            parts.append(f"(SELECT COUNT(*) FROM {fr} WHERE {exprs[0]} = {lit(v)})")
        return f"SELECT {parts[0]} - {parts[1]}"
    return Cand(3, f"the difference between the number of {t.plural} whose {a.phrase} is {v1} and the number whose "
                   f"{a.phrase} is {v2}", [a], render, [_cat(a, v1, 0)[1], _cat(a, v2, 0)[1]], fixed_level=True)


TEMPLATES: tuple[tuple[Callable[[DbContext, random.Random, bool], Cand | None], ...], ...] = (
    (t_count, t_list, t_lookup, t_agg),
    (t_top, t_group_top, t_group_agg, t_count2, t_agg_where),
    (t_having, t_top_parent),
    (t_above_avg, t_not_in, t_cte, t_max_parent, t_diff),
)


# ---------------------------------------------------------------------------------------------
# realising candidates: execute the gold, keep only alternatives with the same rows


def _rows(con: sqlite3.Connection, sql: str) -> list[tuple] | None:
    try:
        return con.execute(sql).fetchall()
    except sqlite3.Error:
        return None


def _multiset(rows: list[tuple]) -> Counter:
    """Rows as a multiset, floats rounded to 6 places (§4 step 4)."""
    return Counter(tuple(round(v, 6) if isinstance(v, float) else v for v in r) for r in rows)


@dataclass
class Question:
    db_id: str
    level: str
    np: str
    sql: str
    routes: list[dict]  # gold first: {"sql", "columns"}
    evidence: str


def realise(ctx: DbContext, cand: Cand, rng: random.Random) -> Question | None:
    rendered = []
    for ch in itertools.product(*(range(len(a.routes)) for a in cand.attrs)):
        q = Recorder(ctx.db)
        sql = cand.render(q, ch)
        if sql:
            rendered.append((ch, sql, q.columns()))
    if not rendered:
        return None
    ch, sql, cols = rendered[rng.randrange(len(rendered))]
    gold = _rows(ctx.con, sql)
    if not gold or len(gold) > MAX_RESULT_ROWS or all(v in (None, 0) for r in gold for v in r):
        return None
    if cand.probe is not None:
        top = _rows(ctx.con, cand.probe(Recorder(ctx.db), ch))
        if top is None or (len(top) == 2 and _multiset(top[:1]) == _multiset(top[1:])):
            return None  # a tie at the top: the answer would not be well defined
    routes, seen, want = [{"sql": sql, "columns": cols}], {tuple(cols)}, _multiset(gold)
    for _, alt_sql, alt_cols in rendered:
        if tuple(alt_cols) not in seen:
            alt = _rows(ctx.con, alt_sql)
            if alt is not None and _multiset(alt) == want:  # verified, else dropped
                routes.append({"sql": alt_sql, "columns": alt_cols})
                seen.add(tuple(alt_cols))
    bare = [expr(Recorder(ctx.db, bare=True), a.routes[i]) for a, i in zip(cand.attrs, ch)]
    level = cand.base if cand.fixed_level else min(2, cand.base + sql.count(" JOIN "))
    return Question(ctx.db.db_id, LEVELS[level], cand.np, sql, routes,
                    "; ".join(h.format(*bare) for h in cand.hints))


def _phrase(rng: random.Random, np: str, db_id: str) -> tuple[str, str]:
    style = rng.choice(sorted(STYLES))
    return style, rng.choice(STYLES[style]).format(np=np, NP=np[0].upper() + np[1:], db=db_id)


def generate_questions(ctxs: list[DbContext], n: int, rng: random.Random, evidence_share: float,
                       seen: set[tuple[str, str]]) -> list[tuple[str, str, Question, bool]]:
    """`n` distinct questions (text and gold SQL both new per database) as (style, text, question,
    with_evidence); a share `evidence_share` of them is phrased to be read with its evidence."""
    out: list[tuple[str, str, Question, bool]] = []
    attempts = 0
    while len(out) < n:
        attempts += 1
        if attempts > 100 * n:
            raise RuntimeError(f"tiny world: only {len(out)} of {n} questions after {attempts} attempts")
        ctx = rng.choice(ctxs)
        level = rng.choices(range(len(LEVELS)), LEVEL_MIX)[0]
        with_evidence = rng.random() < evidence_share
        cand = rng.choice(TEMPLATES[level])(ctx, rng, with_evidence)
        q = realise(ctx, cand, rng) if cand is not None else None
        if q is None:
            continue
        style, text = _phrase(rng, q.np, q.db_id)
        keys = {(q.db_id, "q:" + text.lower()), (q.db_id, "s:" + q.sql)}
        if keys & seen:
            continue
        seen |= keys
        out.append((style, text, q, with_evidence))
    return out


# ---------------------------------------------------------------------------------------------
# the world on disk


def _dump(path: Path, obj: object) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")


def _write_world(root: Path, seed: int, n_train: int, n_dev: int) -> dict:
    """Write every file of the world under `root`; returns the manifest."""
    world = TinyWorld(root)
    db_info: dict[str, dict] = {}
    for db in DB_SPECS:
        rows = generate_rows(db, seed)
        path = world.db_path(db.db_id, "dev")
        _create_sqlite(path, db, rows)
        if not db.dev_only:  # the same bytes in the SynSQL layout
            world.db_path(db.db_id, "train").parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, world.db_path(db.db_id, "train"))
        for t in db.tables:
            desc = path.parent / "database_description" / f"{t.name}.csv"
            desc.parent.mkdir(parents=True, exist_ok=True)
            desc.write_text(_description_csv(db, t), encoding="utf-8")
        db_info[db.db_id] = {"split": "dev" if db.dev_only else "train+dev", "tables": len(db.tables),
                             "rows": {t.name: len(rows[t.name]) for t in db.tables}, "bytes": path.stat().st_size}
    _dump(world.tables_json, [tables_entry(db) for db in DB_SPECS])
    _dump(world.train_tables, [tables_entry(db) for db in DB_SPECS if not db.dev_only])
    _dump(world.dev_tables, [tables_entry(db) for db in DB_SPECS])

    cons = {db.db_id: sqlite3.connect(f"file:{world.db_path(db.db_id, 'dev')}?mode=ro", uri=True) for db in DB_SPECS}
    try:
        ctxs = [DbContext(db, cons[db.db_id]) for db in DB_SPECS]
        seen: set[tuple[str, str]] = set()
        train = generate_questions([c for c in ctxs if not c.db.dev_only], n_train,
                                   random.Random(f"{seed}:train"), TRAIN_EVIDENCE_SHARE, seen)
        dev = generate_questions(ctxs, n_dev, random.Random(f"{seed}:dev"), 1.0, seen)
    finally:
        for con in cons.values():
            con.close()

    data, dev_rows, routes = [], [], {"train": {}, "dev": {}}
    for i, (style, text, q, with_evidence) in enumerate(train):
        data.append({"db_id": q.db_id, "sql_complexity": q.level, "question_style": style, "question": text,
                     "external_knowledge": q.evidence if with_evidence else "", "cot": "", "sql": q.sql})
        if len(q.routes) > 1:
            routes["train"][str(i)] = q.routes
    for i, (_, text, q, _) in enumerate(dev):
        dev_rows.append({"question_id": i, "db_id": q.db_id, "question": text, "evidence": q.evidence,
                         "SQL": q.sql, "difficulty": BIRD_DIFFICULTY[q.level]})
        if len(q.routes) > 1:
            routes["dev"][str(i)] = q.routes
    _dump(world.train_json, data)
    _dump(world.dev_json, dev_rows)
    _dump(world.routes_json, routes)
    manifest = {
        "kind": KIND, "generator_version": GENERATOR_VERSION, "seed": seed, "n_train": n_train, "n_dev": n_dev,
        "databases": db_info,
        "dev_only_databases": sorted(db.db_id for db in DB_SPECS if db.dev_only),
        "train": {"questions": len(data), "route_share": round(len(routes["train"]) / max(1, len(data)), 4),
                  "by_complexity": dict(sorted(Counter(r["sql_complexity"] for r in data).items())),
                  "by_style": dict(sorted(Counter(r["question_style"] for r in data).items())),
                  "with_evidence": sum(bool(r["external_knowledge"]) for r in data),
                  "by_db": dict(sorted(Counter(r["db_id"] for r in data).items()))},
        "dev": {"questions": len(dev_rows), "route_share": round(len(routes["dev"]) / max(1, len(dev_rows)), 4),
                "by_difficulty": dict(sorted(Counter(r["difficulty"] for r in dev_rows).items())),
                "by_db": dict(sorted(Counter(r["db_id"] for r in dev_rows).items()))},
    }
    _dump(world.manifest, manifest)
    return manifest


def build_tinyworld(out_dir: str | Path, seed: int = 0, n_train: int = 3000, n_dev: int = 300,
                    force: bool = False) -> TinyWorld:
    """Build (or reuse) the tiny world in `out_dir`.

    An existing world whose manifest has the same seed, sizes and generator version is returned
    as is; `force` rebuilds. A folder that is not empty and holds no tiny-world manifest is never
    overwritten. The world is written beside `out_dir` first and moved in when complete.
    """
    out = Path(out_dir)
    world = TinyWorld(out)
    want = {"kind": KIND, "seed": seed, "n_train": n_train, "n_dev": n_dev, "generator_version": GENERATOR_VERSION}
    old: dict = {}
    if world.manifest.is_file():
        try:
            old = world.read_manifest()
        except (json.JSONDecodeError, OSError):
            old = {}
    if not force and all(old.get(k) == v for k, v in want.items()):
        return world
    if out.exists() and any(out.iterdir()) and old.get("kind") != KIND:
        raise FileExistsError(f"{out}: not empty and not a tiny world (no {world.manifest.name} of kind {KIND!r}); "
                              "choose an empty folder")
    tmp = out.with_name(out.name + ".building")
    if tmp.exists():
        shutil.rmtree(tmp)
    _write_world(tmp, seed, n_train, n_dev)
    if out.exists():
        shutil.rmtree(out)
    tmp.rename(out)
    return world


def world_text(world: TinyWorld) -> Iterator[str]:
    """Every string the tiny model will read or write: questions, evidence, SQL, schema names and
    the databases' distinct values (the tokenizer is trained on these)."""
    for rec in json.loads(world.train_json.read_text(encoding="utf-8")):
        yield rec["question"]
        yield rec["sql"]
    for rec in json.loads(world.dev_json.read_text(encoding="utf-8")):
        yield rec["question"]
        if rec["evidence"]:
            yield rec["evidence"]
        yield rec["SQL"]
    for entry in json.loads(world.tables_json.read_text(encoding="utf-8")):
        yield from entry["table_names_original"]
        yield from entry["table_names"]
        yield from (name for _, name in entry["column_names_original"])
        yield from (name for _, name in entry["column_names"])
        con = sqlite3.connect(f"file:{world.db_path(entry['db_id'], 'dev')}?mode=ro", uri=True)
        try:
            for table, (_, col) in ((entry["table_names_original"][t], (t, c))
                                    for t, c in entry["column_names_original"] if t >= 0):
                for (v,) in con.execute(f"SELECT DISTINCT {qi(col)} FROM {qi(table)} ORDER BY 1"):
                    if v is not None:
                        yield str(v)
        finally:
            con.close()


def route_stats(world: TinyWorld) -> dict[str, dict[str, float]]:
    """Per split: questions, questions with two or more verified column sets, and their share."""
    routes = json.loads(world.routes_json.read_text(encoding="utf-8"))
    sizes = {"train": len(json.loads(world.train_json.read_text(encoding="utf-8"))),
             "dev": len(json.loads(world.dev_json.read_text(encoding="utf-8")))}
    out = {}
    for split, n in sizes.items():
        multi = [alts for alts in routes.get(split, {}).values() if len({tuple(a["columns"]) for a in alts}) >= 2]
        out[split] = {"questions": n, "multi_route": len(multi), "share_multi_route": len(multi) / n if n else 0.0,
                      "routes_per_multi_route_question": sum(len(m) for m in multi) / len(multi) if multi else 0.0}
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m acesql_lib.tinyworld", description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="folder to write the world into")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--n-train", type=int, default=3000)
    parser.add_argument("--n-dev", type=int, default=300)
    parser.add_argument("--force", action="store_true", help="rebuild even when the manifest matches")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    world = build_tinyworld(args.out, args.seed, args.n_train, args.n_dev, args.force)
    m = world.read_manifest()
    print(f"tiny world in {world.root} ({time.perf_counter() - start:.1f} s): {len(m['databases'])} databases, "
          f"{m['train']['questions']} train (route share {m['train']['route_share']:.1%}), "
          f"{m['dev']['questions']} dev (route share {m['dev']['route_share']:.1%})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
