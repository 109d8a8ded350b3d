"""Vocabulary of the synthetic reports: domains, metrics, themes, phrases.

Why hand-written domains: the documents must read like real reports (a
sustainability report, a transport authority review, a retail annual report,
a public-health review) so that lexical retrieval sees realistic overlap:
the same metric name appears in many sections, years and entities repeat,
and only the exact combination answers a question. All names of places and
programmes are invented from syllables so no question is answerable from
world knowledge.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Metric:
    """A reported quantity. ``decimals == 0`` means an integer (answer format Int)."""

    key: str
    name: str  # lower-case noun phrase, e.g. "energy consumption"
    unit: str  # "" for plain counts, "%" for percentages
    decimals: int
    lo: float  # range of the base value of an entity
    hi: float
    trend: float  # mean yearly relative change
    intensity_unit: str = ""  # unit of the per-employee variant ("" = none)
    additive: bool = True  # shares of a total make sense (pie charts)


@dataclass(frozen=True)
class Theme:
    title: str  # chapter title
    topic: str  # short noun used inside subsection titles
    metrics: tuple[str, ...]  # metric keys discussed in this theme


@dataclass(frozen=True)
class Domain:
    key: str
    report_kinds: tuple[str, ...]
    org_suffixes: tuple[str, ...]
    entity_kind: str  # "site"
    entity_plural: str  # "sites"
    entity_prep: str  # preposition before the entity phrase: "at the Kelden site"
    entity_pattern: str  # "the {} site"
    metrics: tuple[Metric, ...]
    themes: tuple[Theme, ...]
    facilities: tuple[str, ...]  # things photographed in figures
    processes: tuple[str, ...]  # things drawn as diagrams


# --- names ---------------------------------------------------------------------

NAME_HEADS: tuple[str, ...] = (
    "Bren", "Ost", "Kel", "Ald", "Var", "Tam", "Hol", "Mar", "Fen", "Cor", "Dun", "Lin", "Ash", "Wes",
    "Nor", "Rav", "Sel", "Thorn", "Ember", "Glen", "Hart", "Quen", "Brook", "Stan", "Yar", "Pell",
    "Carr", "Mold", "Tor", "Wick",
)
NAME_TAILS: tuple[str, ...] = (
    "moor", "wick", "den", "mere", "holt", "ford", "by", "ton", "field", "gate", "stead", "worth",
    "bridge", "dale", "haven", "ley", "combe", "shaw", "thorpe", "well",
)
ORG_HEADS: tuple[str, ...] = (
    "Harrowgate", "Kestrel", "Alder", "Meridian", "Solent", "Corvid", "Tarn", "Halden", "Orrin", "Vesper",
    "Calder", "Northmere", "Ironvale", "Bellway", "Quarry", "Lowther",
)
INITIATIVE_ADJ: tuple[str, ...] = (
    "Lumen", "Halcyon", "Keystone", "Beacon", "Northstar", "Clearwater", "Evergreen", "Summit", "Pathway",
    "Horizon", "Cobalt", "Meridian", "Tidewater", "Ironbark", "Silverline", "Foxglove", "Granite",
    "Juniper", "Marigold", "Aurora", "Bramble", "Cedar", "Falcon", "Harbour",
)
INITIATIVE_NOUN: tuple[str, ...] = (
    "Retrofit", "Renewal", "Outreach", "Resilience", "Skills", "Efficiency", "Transition", "Access",
    "Partnership", "Modernisation", "Wellbeing", "Recovery", "Digital", "Fleet", "Circularity",
)
INITIATIVE_KIND: tuple[str, ...] = ("Programme", "Initiative", "Project", "Scheme", "Plan", "Pilot")

# --- lists -----------------------------------------------------------------------

LIST_TOPICS: dict[str, tuple[str, ...]] = {
    "key risks": (
        "supply chain disruption", "rising input costs", "regulatory change", "skills shortages",
        "extreme weather events", "cyber security incidents", "ageing infrastructure", "currency volatility",
        "community opposition", "data quality gaps", "contractor performance", "permit delays",
    ),
    "planned actions": (
        "upgrade metering equipment", "publish quarterly progress data", "train line managers",
        "renegotiate supplier contracts", "extend the monitoring network", "review incident procedures",
        "commission an external audit", "pilot new scheduling software", "expand apprenticeship places",
        "replace diesel vehicles", "consolidate storage facilities", "introduce a grievance hotline",
    ),
    "lessons learned": (
        "early engagement shortens approvals", "shared dashboards improve accountability",
        "small pilots reduce rollout risk", "maintenance backlogs compound quickly",
        "local hiring builds trust", "clear ownership speeds decisions", "data definitions must be agreed first",
        "contractors need the same training", "feedback loops must be visible", "budgets need contingency",
    ),
    "stakeholder concerns": (
        "noise at night", "traffic on access roads", "transparency of reporting", "job security",
        "water quality", "pricing", "accessibility of services", "waiting times", "air quality",
        "use of local suppliers", "visual impact", "response to complaints",
    ),
}

# --- filler ----------------------------------------------------------------------

#: Sentences without numbers: they carry no fact, so they never create an
#: unintended answer. Slots: {org} {topic} {ent} {plural} {metric}.
FILLER: tuple[str, ...] = (
    "{org} continued to monitor {metric} closely across all {plural}.",
    "Management reviewed {topic} performance at each quarterly meeting of the executive committee.",
    "The results reflect both operational changes and the wider economic environment.",
    "Data were collected through the group reporting system and checked by each {kind} manager.",
    "Where estimates were necessary, the methodology is described in the notes to this report.",
    "Performance varied between {plural}, reflecting differences in scale and local conditions.",
    "Further improvements are expected as recent investments reach full capacity.",
    "Local teams at {ent} shared practices with other {plural} through regular workshops.",
    "The board received regular updates on {topic} matters during the year.",
    "Comparisons with earlier years should be read with the changes in scope in mind.",
    "Stakeholders have asked for more detail on {metric}, and this report responds to that request.",
    "Responsibility for {topic} sits with the operations director, supported by a central team.",
    "External assurance covered a sample of {plural}, including {ent}.",
    "The trend is broadly consistent with the objectives set out in the previous report.",
    "Several {plural} reported difficulties in recruiting specialist staff.",
    "Investment decisions take account of expected changes in regulation and demand.",
    "A review of reporting boundaries was completed before the figures were consolidated.",
    "{org} intends to publish additional indicators once definitions have been agreed.",
    "Work with suppliers focused on improving the quality and timeliness of data.",
    "The approach will be reviewed again when the current strategy period ends.",
    "Teams at {ent} piloted a revised procedure that will be extended to other {plural}.",
    "Seasonal factors continued to influence {metric} during the year.",
    "The figures below are presented on a consistent basis unless stated otherwise.",
    "Progress was discussed with employee representatives and community groups.",
)

FOOTNOTES: tuple[str, ...] = (
    "Figures exclude contractors and joint ventures not under operational control.",
    "Restated following a change in measurement methodology.",
    "Includes estimates for the final month of the reporting period.",
    "Data for this {kind} were subject to limited external assurance.",
    "Rounded to the precision shown; totals may not add up.",
    "Reporting boundary extended during the year to include newly acquired operations.",
)

SUBSECTION_TEMPLATES: tuple[str, ...] = (
    "{topic} Overview",
    "{topic} Performance by {Kind}",
    "{topic} Targets and Progress",
    "{topic} at {Ent}",
    "{topic} Outlook for {next_year}",
    "{topic} Data and Methodology",
    "{topic} Risks and Opportunities",
    "{topic} Highlights of {year}",
    "Managing {topic}",
    "{topic} Investment Priorities",
    "{topic} Governance",
    "{topic} Trends since {first_year}",
)
SUBSUBSECTION_TEMPLATES: tuple[str, ...] = (
    "{Ent} Operations",
    "Case Study: {Ent}",
    "Measurement Approach",
    "Year-on-Year Changes",
    "Stakeholder Feedback",
    "Next Steps at {Ent}",
)

# --- domains -------------------------------------------------------------------------

_SUSTAINABILITY = Domain(
    key="sustainability",
    report_kinds=("Sustainability Report", "Environmental and Social Review", "ESG Performance Report"),
    org_suffixes=("Minerals", "Industries", "Materials", "Resources"),
    entity_kind="site", entity_plural="sites", entity_prep="at", entity_pattern="the {} site",
    metrics=(
        Metric("energy", "energy consumption", "GWh", 1, 40, 900, 0.02, "MWh per employee"),
        Metric("water", "water withdrawal", "megalitres", 0, 300, 9000, -0.03, "kilolitres per employee"),
        Metric("co2", "greenhouse gas emissions", "kilotonnes CO2e", 1, 10, 400, -0.04, "tonnes CO2e per employee"),
        Metric("waste", "waste generated", "tonnes", 0, 500, 20000, -0.02, "kilograms per employee"),
        Metric("recycled", "recycling rate", "%", 1, 35, 80, 0.02, "", additive=False),
        Metric("injuries", "number of lost-time injuries", "", 0, 3, 40, -0.06),
        Metric("headcount", "headcount", "employees", 0, 200, 4000, 0.01),
        Metric("training", "training hours", "hours", 0, 3000, 60000, 0.04, "hours per employee"),
        Metric("spend", "environmental spending", "million USD", 1, 2, 60, 0.05, "thousand USD per employee"),
    ),
    themes=(
        Theme("Energy and Climate", "Energy", ("energy", "co2")),
        Theme("Water Stewardship", "Water", ("water", "spend")),
        Theme("Waste and Materials", "Waste", ("waste", "recycled")),
        Theme("Health and Safety", "Safety", ("injuries", "training")),
        Theme("Our People", "Workforce", ("headcount", "training")),
        Theme("Environmental Investment", "Investment", ("spend", "energy")),
        Theme("Emissions Reduction", "Emissions", ("co2", "energy")),
    ),
    facilities=("processing plant", "storage yard", "water treatment works", "solar array", "rail loading facility"),
    processes=("water recycling", "waste sorting", "ore processing", "incident reporting", "energy monitoring"),
)

_TRANSPORT = Domain(
    key="transport",
    report_kinds=("Annual Transport Review", "Network Performance Report", "Operations Annual Report"),
    org_suffixes=("Transit Authority", "Transport Executive", "Rail and Bus Board"),
    entity_kind="line", entity_plural="lines", entity_prep="on", entity_pattern="the {} line",
    metrics=(
        Metric("journeys", "passenger journeys", "thousand journeys", 0, 800, 30000, 0.03, "journeys per employee"),
        Metric("ontime", "on-time performance", "%", 1, 78, 97, 0.005, "", additive=False),
        Metric("fleet", "fleet size", "vehicles", 0, 20, 400, 0.01),
        Metric("opcost", "operating cost", "million EUR", 1, 5, 250, 0.03, "thousand EUR per employee"),
        Metric("fares", "fare revenue", "million EUR", 1, 3, 200, 0.04, "thousand EUR per employee"),
        Metric("incidents", "number of reported safety incidents", "", 0, 5, 120, -0.03),
        Metric("jtime", "average journey time", "minutes", 1, 12, 55, -0.01, "", additive=False),
        Metric("staff", "operating staff", "employees", 0, 100, 2500, 0.01),
        Metric("complaints", "number of customer complaints", "", 0, 50, 3000, -0.02),
    ),
    themes=(
        Theme("Ridership and Demand", "Ridership", ("journeys", "fares")),
        Theme("Reliability", "Reliability", ("ontime", "jtime")),
        Theme("Fleet and Infrastructure", "Fleet", ("fleet", "opcost")),
        Theme("Financial Performance", "Finance", ("opcost", "fares")),
        Theme("Safety and Security", "Safety", ("incidents", "staff")),
        Theme("Customer Experience", "Customer", ("complaints", "ontime")),
        Theme("Workforce", "Workforce", ("staff", "opcost")),
    ),
    facilities=("depot", "interchange station", "maintenance workshop", "control centre", "ticket hall"),
    processes=("timetable planning", "fault reporting", "vehicle maintenance", "complaint handling", "fare collection"),
)

_RETAIL = Domain(
    key="retail",
    report_kinds=("Annual Report", "Integrated Annual Report", "Strategic Report"),
    org_suffixes=("Retail Group", "Holdings", "Stores plc", "Brands"),
    entity_kind="region", entity_plural="regions", entity_prep="in", entity_pattern="the {} region",
    metrics=(
        Metric("revenue", "revenue", "million USD", 1, 80, 2500, 0.05, "thousand USD per employee"),
        Metric("profit", "operating profit", "million USD", 1, 5, 300, 0.04, "thousand USD per employee"),
        Metric("stores", "number of stores", "", 0, 12, 400, 0.02),
        Metric("employees", "number of employees", "", 0, 300, 12000, 0.02),
        Metric("csat", "customer satisfaction score", "points", 1, 60, 90, 0.01, "", additive=False),
        Metric("capex", "capital expenditure", "million USD", 1, 4, 180, 0.03, "thousand USD per employee"),
        Metric("units", "units sold", "thousand units", 0, 200, 9000, 0.04, "units per employee"),
        Metric("online", "online sales share", "%", 1, 5, 45, 0.08, "", additive=False),
        Metric("returns", "product returns", "thousand items", 0, 10, 600, 0.01),
    ),
    themes=(
        Theme("Group Performance", "Group", ("revenue", "profit")),
        Theme("Store Network", "Stores", ("stores", "capex")),
        Theme("Customers and Channels", "Customer", ("csat", "online")),
        Theme("People and Culture", "People", ("employees", "profit")),
        Theme("Products and Supply", "Product", ("units", "returns")),
        Theme("Capital Allocation", "Capital", ("capex", "revenue")),
        Theme("Digital Growth", "Digital", ("online", "units")),
    ),
    facilities=("flagship store", "distribution centre", "head office", "fulfilment hub", "outlet park"),
    processes=("order fulfilment", "returns handling", "store refurbishment", "supplier onboarding",
               "stock replenishment"),
)

_HEALTH = Domain(
    key="health",
    report_kinds=("Public Health Annual Review", "Health Services Report", "Population Health Survey"),
    org_suffixes=("Health Board", "Health Authority", "Care Trust"),
    entity_kind="district", entity_plural="districts", entity_prep="in", entity_pattern="the {} district",
    metrics=(
        Metric("vacc", "vaccination coverage", "%", 1, 70, 98, 0.005, "", additive=False),
        Metric("visits", "clinic visits", "thousand visits", 0, 20, 900, 0.02, "visits per employee"),
        Metric("beds", "number of hospital beds", "", 0, 40, 1500, 0.0),
        Metric("wait", "average waiting time", "days", 1, 5, 60, -0.02, "", additive=False),
        Metric("workers", "number of health workers", "", 0, 80, 5000, 0.02),
        Metric("budget", "health budget", "million EUR", 1, 10, 500, 0.03, "thousand EUR per employee"),
        Metric("cases", "number of notified cases", "", 0, 100, 8000, -0.02),
        Metric("screen", "screening uptake", "%", 1, 40, 85, 0.01, "", additive=False),
        Metric("calls", "helpline calls", "thousand calls", 0, 5, 400, 0.05),
    ),
    themes=(
        Theme("Prevention", "Prevention", ("vacc", "screen")),
        Theme("Access to Care", "Access", ("visits", "wait")),
        Theme("Hospital Capacity", "Capacity", ("beds", "workers")),
        Theme("Funding", "Funding", ("budget", "visits")),
        Theme("Disease Surveillance", "Surveillance", ("cases", "calls")),
        Theme("Workforce Planning", "Workforce", ("workers", "budget")),
        Theme("Community Services", "Community", ("calls", "screen")),
    ),
    facilities=("community clinic", "district hospital", "mobile screening unit", "laboratory", "pharmacy hub"),
    processes=("patient referral", "screening invitation", "case notification", "appointment booking",
               "vaccine cold chain"),
)

DOMAINS: tuple[Domain, ...] = (_SUSTAINABILITY, _TRANSPORT, _RETAIL, _HEALTH)
