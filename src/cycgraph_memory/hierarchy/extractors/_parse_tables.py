"""Private word tables of the parser tier (relation lemmas, role nouns, modality).

Relation names are the rule tier's canonical names (``work_at``, ``lead``, ...) plus the
few relations the rule tier also knows (``appoint``, ``replace``,
``retire_from``, ``sign``, ``open``, ``publish``, ``adopt``, ``work_on``,
``customer_of``).
"""

from __future__ import annotations


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


# verb lemma -> {preposition or particle ("" = direct object): relation}
VERB_RELATIONS: dict[str, dict[str, str]] = {
    "work": {"at": "work_at", "for": "work_at", "with": "collaborate_with", "on": "work_on"},
    "spend": {"at": "work_at"},
    # "got promoted at Airbnb" (passive only: ``PASSIVE_ONLY``).
    "promote": {"at": "work_at"},
    "employ": {"": "hire"},
    "depend": {"on": "depend_on"},
    "rely": {"on": "depend_on"},
    "use": {"": "use"},
    "utilize": {"": "use"},
    "build": {"": "build", "on": "use", "with": "use"},
    "found": {"": "found"},
    "co-found": {"": "found"},
    "cofound": {"": "found"},
    "own": {"": "own"},
    "lead": {"": "lead", "at": "work_at"},
    "run": {"": "lead", "on": "use"},
    "head": {"": "lead"},
    "chair": {"": "lead"},
    "report": {"to": "report_to"},
    "live": {"in": "live_in"},
    "reside": {"in": "live_in"},
    "base": {"in": "locate_in"},
    "headquarter": {"in": "locate_in"},
    "locate": {"in": "locate_in"},
    "belong": {"to": "part_of"},
    "create": {"": "create"},
    "invent": {"": "create"},
    "acquire": {"": "acquire"},
    "buy": {"": "acquire"},
    "purchase": {"": "acquire"},
    "join": {"": "join", "from": "work_at"},
    "come": {"from": "work_at"},
    "start": {"at": "join", "": "found_org"},
    "establish": {"": "found_org"},
    "co-own": {"": "own"},
    "maintain": {"": "maintain"},
    "develop": {"": "develop"},
    "partner": {"with": "partner_with"},
    "invest": {"in": "invest_in"},
    "hire": {"": "hire"},
    "recruit": {"": "hire"},
    "write": {"": "write"},
    "author": {"": "write"},
    "design": {"": "design"},
    "study": {"at": "study_at"},
    "graduate": {"from": "study_at"},
    "move": {"to": "move_to", "from": "left_org"},
    # A departure only ends a job ("Kevin left Initech", "quit", "resigned from").
    "leave": {"": "left_job"},
    "quit": {"": "left_job"},
    "resign": {"from": "left_job"},
    "relocate": {"to": "move_to"},
    "collaborate": {"with": "collaborate_with"},
    "pair": {"with": "collaborate_with"},
    "mentor": {"": "mentor"},
    "coach": {"": "mentor"},
    "fund": {"": "fund"},
    "sponsor": {"": "fund"},
    "back": {"": "fund"},
    "launch": {"": "launch"},
    "release": {"": "launch"},
    "teach": {"at": "teach_at"},
    "contribute": {"to": "contribute_to"},
    "integrate": {"with": "integrate_with"},
    "sell": {"": "sell"},
    "marry": {"": "marry"},
    "appoint": {"": "appoint"},
    "replace": {"": "replace"},
    "succeed": {"": "replace"},
    "retire": {"from": "retire_from"},
    "sign": {"": "sign", "with": "sign"},
    "open": {"": "open"},
    "publish": {"": "publish"},
    "adopt": {"": "adopt"},
    "manage": {"": "manage", "at": "work_at"},
    "supervise": {"": "manage"},
    "oversee": {"": "manage"},
}

# Lemmas read only in the passive: "Noor got promoted at Airbnb" says where Noor works,
# "Airbnb promoted Noor at its Dublin office" says nothing of Airbnb's job.
PASSIVE_ONLY = _words("promote")

# Verb lemma + "as" complement: "named X as its chief" (appoint), "joins as".
AS_RELATIONS: dict[str, str] = {"name": "appoint"}

# Particle verbs: (lemma, particle) -> relation.
PARTICLE_RELATIONS: dict[tuple[str, str], str] = {
    ("take", "over"): "acquire",
    ("team", "up"): "partner_with",
}

# "got a job at X" (work_at) / "accepted an offer from X" (join): only verbs that take the
# job or the offer; "refused a takeover offer from X", "applied for a job at X" say neither.
JOB_NOUNS = _words("job position role gig post")
JOB_TAKING_VERBS = _words("get land take accept have hold find secure start")
OFFER_TAKING_VERBS = _words("accept take")
JOB_LEAVING_VERBS = _words("quit leave")

# Relations whose "with" person shares the act: "founded X with Y", "owns X with Y".
COMITATIVE_RELATIONS = frozenset({"found", "found_org", "own"})

# Lowercase place nouns that a named place refines: "moved to a new office in Boulder".
PLACE_NOUNS = _words(
    """
    office offices ground stadium site building home house flat apartment premises
    headquarters hq campus facility warehouse plant studio
    """
)

# Nouns that describe an organisation in apposition ("Pebble, a startup in Austin,").
ORG_DESCRIPTION_NOUNS = _words(
    """
    company startup start-up firm business agency bank charity nonprofit non-profit
    maker manufacturer retailer chain club group lender insurer publisher studio
    consultancy provider supplier carrier operator developer producer brewery school
    """
)

# Nominal events that hold only under these head verbs ("announced a partnership with X";
# "ended its partnership with X" states none).
NOMINAL_HEADS: dict[str, frozenset[str]] = {
    "partnership": _words("announce form sign strike seal enter unveil launch have expand"),
}

# Nominalised events: noun lemma -> (preposition to the patient, relation).
NOMINAL_EVENTS: dict[str, tuple[str, str]] = {
    "partnership": ("with", "partner_with"),
    "signing": ("of", "sign"),
    "appointment": ("of", "appoint"),
    "acquisition": ("of", "acquire"),
    "hiring": ("of", "hire"),
    "replacement": ("for", "replace"),
    "successor": ("to", "replace"),
}

# Nouns for authored works: "the novel by X" -> write(X, work).
WORK_NOUNS = _words("novel book paper study article memoir album song film report essay")

# Role nouns next to a person's name: role -> relation from the person to the organisation.
ROLE_RELATIONS: dict[str, str] = {
    **dict.fromkeys(["founder", "co-founder", "cofounder", "co"], "found"),
    **dict.fromkeys(
        [
            "ceo",
            "head",
            "chair",
            "chairman",
            "chairwoman",
            "president",
            "principal",
            "director",
            "leader",
            "boss",
            "executive",
        ],
        "lead",
    ),
    **dict.fromkeys(["manager", "coach"], "manage"),
    **dict.fromkeys(
        [
            "engineer",
            "chief",
            "chef",
            "employee",
            "staffer",
            "analyst",
            "spokesperson",
            "spokesman",
            "spokeswoman",
            "scientist",
            "researcher",
            "designer",
            "developer",
            "officer",
            "cfo",
            "cto",
            "coo",
            "midfielder",
            "striker",
            "defender",
            "goalkeeper",
            "player",
            "editor",
            "reporter",
            "professor",
            "lecturer",
            "nurse",
            "doctor",
            "surgeon",
            "teacher",
            "intern",
            "partner",
            "vp",
            "lawyer",
            "economist",
        ],
        "work_at",
    ),
}

# Titles and role words stripped from the front of a person's name.
NAME_PREFIXES = _words(
    """
    mr mrs ms miss mx dr prof professor sir dame lord lady madam mister doctor judge
    senator president governor mayor rev reverend captain capt sgt officer coach chef
    director principal midfielder striker defender goalkeeper manager founder cofounder
    co-founder ceo cto cfo chief deputy minister chancellor secretary chairman chairwoman
    chairperson
    """
)

# Heads of verbs under which a clause is not asserted ("denied that ...").
NON_ASSERTING_HEADS = _words(
    """
    deny doubt wonder hope want wish plan consider imagine suppose think guess believe
    expect intend aim try seek ask rumor rumour refuse decline reject
    """
)
MODALS = _words("might may could would should 'd must can ca shall")
CONDITIONAL_MARKS = _words("if unless whether whenever")

# Lowercase nouns that extend a name before them ("the Doyle family") beyond the
# organisation and tool head nouns.
NAME_GROUP_NOUNS = _words("family")

# Head nouns that type a lowercase noun phrase endpoint.
TOOL_HEAD_NOUNS = _words(
    """
    service api gateway module pipeline app application tool library framework database
    db system job model flow generator engine platform server cluster queue cache sdk
    cli script bot dashboard exporter replica tooling cert certificate repo repository
    website site feature design-system
    """
)
ORG_HEAD_NOUNS = _words(
    """
    team group division department unit committee panel club company firm startup bank
    office agency council board band chain hospital school university college
    foundation trust charity lab org squad crew museum gym cafe restaurant bakery
    """
)
# Head nouns of other lowercase endpoints worth keeping (works, pets, projects).
CONCEPT_HEAD_NOUNS = _words(
    """
    paper book novel article study report album song film dog cat puppy kitten project
    audit migration contract agent replica
    """
)
# Lowercase nouns that are never relation endpoints on their own.
GENERIC_NOUNS = _words(
    """
    year years time times thing things lot way people one day days week weeks month
    months hour hours minute minutes part kind sort bit deal place job today tomorrow
    yesterday morning night everyone everything something someone anyone nothing
    """
)
# Adjectives kept in a noun-phrase endpoint only when they are not generic.
GENERIC_ADJECTIVES = _words(
    """
    new old former current second first last next big small whole own same other main
    great good bad nice little large huge entire latest early late
    """
)
# Definite descriptions that corefer with the latest organisation ("the company said").
ORG_ANAPHORS = _words(
    """
    company chain firm club hospital bank startup school trust charity group business
    team organisation organization publisher
    """
)

# Definite nouns naming a whole organisation: "the club said", "the council voted" give
# the name they refer back to organisation evidence (a team is part of one: not here).
ORG_TYPE_ANAPHORS = _words(
    """
    company firm club council startup business bank charity trust school hospital chain
    publisher organisation organization university college agency lender retailer insurer
    """
)

NER_TYPES: dict[str, tuple[str, int]] = {
    "PERSON": ("person", 60),
    "ORG": ("organization", 60),
    "GPE": ("location", 60),
    "LOC": ("location", 60),
    "FAC": ("location", 40),
    "PRODUCT": ("tool", 40),
    "WORK_OF_ART": ("concept", 40),
    "EVENT": ("concept", 40),
    "LAW": ("concept", 40),
    "LANGUAGE": ("tool", 30),
}

# Relation-argument type cues for relations the rule tier's table lacks.
EXTRA_ROLE_CUES: dict[str, tuple[tuple[str, int] | None, tuple[str, int] | None]] = {
    "appoint": (None, ("person", 60)),
    "replace": (("person", 40), ("person", 40)),
    "retire_from": (("person", 60), ("organization", 40)),
    "sign": (("organization", 30), None),
    "open": (("person", 20), None),
    "publish": (("organization", 40), None),
    "adopt": (("person", 40), None),
    "work_on": (("person", 40), ("tool", 30)),
    "customer_of": (None, ("organization", 40)),
    "launch": (("organization", 30), ("tool", 50)),
    "marry": (("person", 60), ("person", 60)),
    "write": (("person", 40), None),
    "teach_at": (("person", 60), ("organization", 60)),
}
