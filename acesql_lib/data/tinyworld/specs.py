"""The eight databases of the tiny world as data: name lists, column and table specs, `DB_SPECS`.

A column's `gen` says how its values are drawn (`databases.generate_rows`); copies (`("copy",
fk, parent_col)`) and derived columns (`("derived", expression, fn)`) are the built-in alternative
routes the package docstring describes.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

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


def readable_name(name: str) -> str:
    """'OrderItems' -> 'order items', 'birth_year' -> 'birth year' (tables.json readable names)."""
    return re.sub(r"(?<=[a-z])(?=[A-Z])", " ", name).replace("_", " ").lower()
