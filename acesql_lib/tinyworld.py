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
BIRD_DIFFICULTY = {"Simple": "simple", "Moderate": "moderate", "Complex": "challenging", "Highly Complex": "challenging"}
STYLES = {  # SynSQL question styles; each wraps the noun phrase a template builds
    "Formal": ("Please provide {np}.", "Could you report {np}?"),
    "Colloquial": ("Hey, can you tell me {np}?", "So what's {np}?"),
    "Imperative": ("Find {np}.", "Show {np}.", "List {np}."),
    "Interrogative": ("What is {np}?", "Which value is {np}?"),
    "Descriptive": ("I would like to know {np}, based on the records in the {db} database.",),
    "Concise": ("{NP}?",),
}
MULTI_ROUTE_WEIGHT = 4  # UNKNOWN: attributes with several routes are drawn this much more often
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
          C("age", "integer", ("derived", "{REF} - {birth_year}", _age), "num")),
        T("courses", "course", "courses", 150, C("course_id", "integer", ID),
          C("title", "text", ("title", ADJ, NOUN), "label"),
          C("dept_id", "integer", FK, fk="departments"),
          C("teacher_id", "integer", FK, fk="teachers"),
          C("credits", "integer", ("int", 1, 6), "num")),
        T("students", "student", "students", 800, C("student_id", "integer", ID),
          C("full_name", "text", ("person",), "label", "name"),
          C("home_city", "text", ("choice", CITIES), "cat", "home city"),
          C("birth_year", "integer", ("int", 1996, 2006), "num", "birth year"),
          C("age", "integer", ("derived", "{REF} - {birth_year}", _age), "num"),
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
          C("age", "integer", ("derived", "{REF} - {birth_year}", _age), "num"),
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
          C("age", "integer", ("derived", "{REF} - {birth_year}", _age), "num"),
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
          C("track_title", "text", ("title", NOUN, ["Song", "Blues", "Waltz", "Dream", "Dance", "Ballad", "Anthem",
                                                    "Lullaby", "March", "Hymn"]), "", "track title"),
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
          C("age", "integer", ("derived", "{REF} - {birth_year}", _age), "num")),
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
            out.append(Attr(anchor, pc.role, f"{fk.link_phrase or p.singular} {pc.phrase or _readable(pc.name)}",
                            tuple(routes), p.name))
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
                out.append(Attr(anchor, gc.role, f"{g.singular} {gc.phrase or _readable(gc.name)}", tuple(routes), g.name))
    return out
