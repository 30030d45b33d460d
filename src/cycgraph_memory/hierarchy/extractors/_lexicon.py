"""Private word lists for the rule-based extractor.

The gazetteers are deliberately modest: well-known companies, software, places and common
given names. They are cues, not the only route to a type: unknown names are typed from
context (titles, organisation suffixes, relation arguments, prepositions).
"""

from __future__ import annotations

from cycgraph_memory.normalize import normalize_entity_name


def _words(text: str) -> frozenset[str]:
    return frozenset(w.strip().lower() for w in text.split() if w.strip())


def word_set(text: str) -> frozenset[str]:
    """Lowercase words of a whitespace-separated list."""
    return _words(text)


def _phrases(text: str) -> frozenset[str]:
    return frozenset(p.strip().lower() for p in text.split(",") if p.strip())


# Capitalised words that never start or form an entity on their own.
STOPWORDS = _words(
    """
    i me my mine we us our ours you your yours he him his she her hers it its they them
    their theirs this that these those there here who whom whose what which when where why
    how whoever whatever everyone everybody everything someone somebody something anyone
    anybody anything nobody nothing none each every all both either neither some any many
    much few several most more less no not nor yes yeah yep yup nope ok okay sure right
    well so oh ah hi hello hey thanks thank please sorry nice great cool good fine awesome
    wow hmm also and but or then now just actually anyway anyways still got let maybe
    perhaps however therefore meanwhile besides furthermore moreover otherwise instead
    honestly basically apparently hopefully unfortunately fortunately luckily sadly
    yesterday today tomorrow tonight last next since after before when while if because
    although though unless until as at in on for from to with without by of about into
    onto over under between through during against among per via like unlike the a an
    did does do done is are was were be been being am will would can could should shall
    may might must have has had having get gets getting go goes went make made say said
    tell told think thought know knew see saw look looks looked seems seemed
    monday tuesday wednesday thursday friday saturday sunday january february march april
    june july august september october november december mon tue tues wed thu thur thurs
    fri sat sun jan feb mar apr jun jul aug sep sept oct nov dec spring summer autumn fall
    winter morning afternoon evening night weekend week month year day hour minute
    one two three four five six seven eight nine ten first second third fourth fifth
    once twice again already always never often sometimes usually
    mine hers true false null none note update edit question answer re fwd fyi btw
    good-bye goodbye bye cheers regards dear
    sounds definitely congrats congratulations absolutely totally exactly agreed welcome
    lol haha hahaha omg yay perfect amazing indeed tbh imo ugh whoa oops alright gotcha
    noted heads quick guess wait anyway aww damn nah thx ty np yes! ooh oh
    understood acknowledged roger makes
    mondays tuesdays wednesdays thursdays fridays saturdays sundays weekends mornings
    evenings nights
    """
)

# Titles that mark the following name as a person (stripped from the name).
PERSON_TITLES = _words(
    """
    mr mrs ms miss mx dr prof professor sir dame lord lady madam mister doctor judge
    senator president governor mayor rev reverend captain capt sgt officer coach
    chef principal midfielder striker defender goalkeeper chancellor minister
    """
)

# Lowercase role / kinship nouns that mark a directly following name as a person.
PERSON_ROLE_NOUNS = _words(
    """
    sister brother mother father mom mum dad mommy daddy son daughter wife husband partner
    girlfriend boyfriend fiance fiancee cousin uncle aunt niece nephew grandma grandpa
    grandmother grandfather friend colleague coworker co-worker teammate boss manager
    mentor mentee intern student teacher professor tutor neighbor neighbour roommate
    flatmate founder cofounder co-founder ceo cto cfo coo vp director engineer developer
    designer recruiter lawyer doctor nurse dentist therapist landlord client customer
    assistant lead architect analyst scientist researcher author writer
    """
)

# Last-token suffixes of organisation names.
ORG_SUFFIXES = _words(
    """
    corp corporation inc incorporated ltd limited llc llp plc gmbh ag sa co company
    companies labs lab technologies technology tech systems group university college
    institute school academy bank foundation association society agency partners capital
    ventures holdings industries robotics dynamics studios studio media networks
    solutions software consulting enterprises airlines motors pharmaceuticals
    therapeutics bio energy insurance hospital clinic council ministry department
    commission committee fund trust club team league federation union press publishing
    grocers grocery market markets united fc afc kitchen bakery cafe restaurant bistro
    diner brewery physio pharmacy center centre health medical logistics freight retail
    grid power post times gazette herald tribune partnership elementary museum gallery
    theatre theater hotel airways rail railways analytics homes rovers rangers athletic
    wanderers albion dairy organics games primary
    """
)

# First tokens that introduce an organisation ("University of X", "Bank of X").
ORG_PREFIXES = _words("university bank institute college school department ministry museum")

# Lowercase common nouns that, before "called/named X", type X.
ORG_NOUNS = _words(
    """
    company startup start-up firm fintech business agency bank university college school
    lab nonprofit non-profit charity organization organisation org vendor provider
    publisher studio brand retailer consultancy fund
    """
)
TOOL_NOUNS = _words(
    """
    tool library framework package app application service database db language
    platform plugin extension editor model api sdk cli engine runtime module product
    """
)

# Last tokens that make a multi-word name a tool ("GitHub Actions", "Visual Studio Code").
TOOL_HEADS = _words("actions api sdk cli studio code db server cloud sql script os js")

# Acronyms that are not entities, and typed acronyms.
ACRONYM_STOP = _words(
    """
    ceo cto cfo coo cio cmo vp svp evp hr pr qa ok i am pm fyi asap tbd tba eta faq
    diy aka rsvp btw imo imho lol omg tldr tl dr wfh ooo eod eow n/a ps nb
    """
)
_CONCEPT_ACRONYMS = _words(
    """
    api ai ml llm llms ui ux nlp ci cd sla kpi okr roi seo mvp poc saas paas iaas
    b2b b2c gdpr hipaa soc etl oss
    """
)
_TOOL_ACRONYMS = _words(
    """
    aws gcp sql html css json yaml xml http https rest grpc gpu cpu tpu sdk cli crm
    erp k8s s3 ec2 rds sqs sns vpc ios dns tcp udp ssh vpn ide jvm php
    """
)
_ORG_ACRONYMS = _words(
    """
    nasa ibm fbi cia nsa un eu who mit ucla nyu cmu bbc cnn nhs amd hp sap bmw nato
    imf irs sec ftc fda cdc
    """
)
_PLACE_ACRONYMS = _words("usa us uk uae nyc sf la dc")
ACRONYM_TYPES: dict[str, str] = {
    **dict.fromkeys(_CONCEPT_ACRONYMS, "concept"),
    **dict.fromkeys(_TOOL_ACRONYMS, "tool"),
    **dict.fromkeys(_ORG_ACRONYMS, "organization"),
    **dict.fromkeys(_PLACE_ACRONYMS, "location"),
}

FIRST_NAMES = _words(
    """
    aaron abigail adam aditya ahmed aisha alan albert alex alexander alexandra alice
    alicia amanda amber amelia amir amy ana andrea andrew angela anna anne anthony arjun
    ashley ava barbara ben benjamin beth brandon brian bruce carlos carol caroline
    catherine charles charlie charlotte chen chloe chris christian christina christopher
    claire daniel danielle david deborah dennis diana diego dmitri donald dorothy dylan
    edward elena eli elijah elizabeth ella emily emma eric erik ethan eva evelyn fatima
    felix frank gabriel gary george grace greg gregory hannah harry helen henry hiro
    hugo ian isaac isabella ivan jack jacob james jane janet jason jennifer jeremy
    jessica jill joe john jonathan jordan jose joseph joshua juan julia julian justin
    karen kate katherine kathy kenji kevin kim kyle laura lauren leo liam lily lina
    linda lisa liam lucas lucy luis maria mark marcus mary matt matthew max maya megan
    melissa mia michael michelle mike mohammed mohamed nadia nancy natalie nathan nick
    nicole noah nora oliver olivia omar oscar oskar pablo patricia patrick paul peter
    priya rachel rahul raj ravi rebecca richard robert ryan sam samantha samuel sandra
    sara sarah scott sean sebastian sofia sophia sophie stephen steve steven susan tom
    thomas tim timothy tyler victor victoria vikram walter wei william yuki zoe zach
    bob carol dave eve mallory trent peggy alan ann anne bill betty carl dan dana don
    ella fred gina hank ivy jim joan judy ken kim larry leah liz mel ned nina pam pete
    ray rita rob ron rose roy ruth sue ted tina tony val wendy will
    """
)

KNOWN_ORGS = _phrases(
    """
    google, alphabet, microsoft, apple, amazon, meta, facebook, netflix, openai,
    anthropic, nvidia, intel, amd, ibm, oracle, salesforce, adobe, spotify, uber, lyft,
    airbnb, stripe, shopify, twitter, linkedin, tesla, spacex, samsung, sony, huawei,
    alibaba, tencent, baidu, bytedance, tiktok, paypal, square, block, atlassian,
    datadog, snowflake inc, databricks, cloudflare, github, gitlab, mozilla, red hat,
    canonical, vmware, cisco, dell, hp, siemens, ericsson, nokia, philips, volkswagen,
    toyota, honda, ford, general motors, boeing, airbus, walmart, target, costco,
    starbucks, mcdonald's, coca-cola, pepsi, nike, adidas, goldman sachs, jpmorgan,
    morgan stanley, blackrock, sequoia, andreessen horowitz, y combinator, deepmind,
    hugging face, mistral, cohere,  monzo, klarna, wise, n26, booking.com,
    expedia, zoom, slack technologies, dropbox, box, twilio, okta, mongodb inc, elastic,
    confluent, hashicorp, vercel, netlify, heroku, digitalocean, figma, canva, notion labs,
    asana, trello, reddit, pinterest, snap, discord, yahoo, ebay, etsy, instacart,
    doordash, deliveroo, zalando, sap, accenture, deloitte, mckinsey, pwc, kpmg,
    stanford, harvard, mit, oxford, cambridge, berkeley, princeton, yale, columbia,
    caltech, eth zurich, nasa, the guardian, new york times, bbc, reuters, bloomberg,
     nintendo, ubisoft, valve, epic games, unity technologies,
    intuit, workday, servicenow, palantir, coinbase, binance, robinhood, visa, mastercard
    """
)

KNOWN_TOOLS = _phrases(
    """
    python, java, javascript, typescript, go, golang, rust, ruby, php, kotlin, swift,
    scala, haskell, elixir, erlang, c++, c#, perl, r, julia, dart, lua, bash, sql,
    postgresql, postgres, mysql, mariadb, sqlite, redis, mongodb, cassandra, dynamodb,
    elasticsearch, opensearch, clickhouse, snowflake, bigquery, redshift, kafka,
    rabbitmq, celery,  airflow, dbt, spark, hadoop, flink, docker, kubernetes,
    helm, terraform, ansible, puppet, chef, jenkins, circleci, travis, github actions,
    gitlab ci, argo, nginx, apache, caddy, envoy, istio, linux, ubuntu, debian, windows,
    macos, ios, android, react, react native, vue, angular, svelte, next.js, nuxt,
    django, flask, fastapi,  pydantic, sqlalchemy, rails, ruby on rails,
    laravel, spring, express, node, node.js, deno, bun, webpack, vite, babel, eslint,
    prettier, jest, pytest, numpy, pandas, pytorch, tensorflow, keras, scikit-learn,
    jupyter, vscode, vim, emacs, git, npm, yarn, pip, poetry, conda, uvicorn, gunicorn,
    grafana, prometheus, sentry,  splunk, jira, confluence, slack, notion,
    trello, figma, sketch, excel, tableau, looker, power bi, salesforce crm, hubspot,
    zendesk, firebase, supabase, vercel, netlify, heroku, aws, azure, gcp,
    google cloud, lambda, s3, ec2, cloudformation, pulumi, graphql, grpc, openapi,
    swagger, postman, chatgpt, claude, gemini, llama, copilot, langchain,
    jetpack compose, flutter, xcode, unity, unreal engine, bitbucket,
    stripe api, twilio api, mailchimp, zapier, retool, metabase, superset, dagster,
    prefect, ray, dask, polars, duckdb, sqlite3, memcached, consul, vault, nomad
    """
)

# Services a customer switches between ("switched to T-Mobile from Verizon", "we moved from
# Slack to Discord"): carriers, internet providers, messaging, mail and storage. A switch
# between two of these (or known tools) is a change of what one uses, never of employer.
# Not typed by this list (Discord stays an organisation): only the switch frame reads it.
# Streaming and music companies that are large employers (Spotify, Netflix) are left out.
KNOWN_PRODUCTS = _phrases(
    """
    verizon, t-mobile, tmobile, at&t, att, sprint, comcast, xfinity, spectrum, cox,
    centurylink, frontier, google fi, mint mobile, cricket wireless, boost mobile, visible,
    us cellular, metro pcs, metropcs, vodafone, o2, bt, sky, virgin media, telus, rogers,
    starlink, discord, whatsapp, telegram, signal, skype, microsoft teams, teams, zoom,
    google meet, gmail, outlook, hotmail, icloud, protonmail, proton mail, dropbox,
    google drive, onedrive, chrome, firefox, safari, brave, bing, duckduckgo,
    mattermost, rocket.chat, webex, hangouts, imessage, messenger, wechat, viber,
    apple music, youtube music, disney+, hbo max, prime video, paramount+
    """
)


def product_name(name: str) -> bool:
    """True when ``name`` is a known tool or a service customers switch between."""
    key = normalize_entity_name(name)
    return key in _PRODUCT_KEYS or key in KNOWN_TOOLS


# Lowercase tokens recognised as tools even when written in lowercase. Excludes names that
# are also common English words ("react", "go", "rust", "swift", "spark", "express", ...).
LOWERCASE_TOOLS = _words(
    """
    python javascript typescript golang kotlin postgresql postgres mysql mariadb sqlite
    redis mongodb cassandra dynamodb elasticsearch clickhouse bigquery redshift kafka
    rabbitmq celery  airflow dbt hadoop docker kubernetes k8s helm terraform
    ansible jenkins circleci nginx linux ubuntu debian macos django flask fastapi
    pydantic sqlalchemy laravel webpack vite eslint pytest numpy pandas pytorch
    tensorflow keras jupyter vscode vim emacs git npm yarn pip conda uvicorn gunicorn
    grafana prometheus sentry jira kubectl graphql langchain duckdb polars memcached
    """
)

KNOWN_PLACES = _phrases(
    """
    new york, new york city, san francisco, los angeles, seattle, boston, chicago,
    austin, denver, portland, miami, atlanta, dallas, houston, phoenix, philadelphia,
    washington, pittsburgh, detroit, minneapolis, san diego, san jose, palo alto,
    mountain view, menlo park, cupertino, brooklyn, manhattan, silicon valley, toronto,
    vancouver, montreal, ottawa, mexico city, london, manchester, edinburgh, dublin,
    paris, berlin, munich, hamburg, frankfurt, amsterdam, rotterdam, brussels,
    zurich, geneva, vienna, prague, warsaw, budapest, copenhagen, stockholm,
     oslo, helsinki, reykjavik, madrid, barcelona, lisbon, porto, rome,
    milan, athens, istanbul, tel aviv, dubai, cairo, lagos, nairobi, cape town,
    johannesburg, mumbai, bangalore, bengaluru, delhi, new delhi, hyderabad, chennai,
    singapore, hong kong, shanghai, beijing, shenzhen, tokyo, osaka, kyoto, seoul,
    taipei, bangkok, jakarta, manila, sydney, melbourne, brisbane, auckland,
    sao paulo, rio de janeiro, buenos aires, santiago, lima, bogota,
     nashville, salt lake city, raleigh, baltimore, cleveland, columbus,
    usa, united states, america, canada, mexico, brazil, argentina, uk,
    united kingdom, england, scotland, wales, ireland, france, germany, spain,
    portugal, italy, netherlands, belgium, switzerland, austria, sweden, norway,
    denmark, finland, iceland, poland, greece, turkey, israel, egypt, nigeria, kenya,
    south africa, india, china, japan, korea, south korea, taiwan, vietnam,
    thailand, indonesia, philippines, australia, new zealand, europe, asia, africa,
    california, texas, florida, oregon, colorado, massachusetts, illinois, ontario,
    quebec, bavaria, catalonia, scandinavia, the bay area, bay area
    """
)

_PRODUCT_KEYS = frozenset(normalize_entity_name(p) for p in KNOWN_PRODUCTS)
