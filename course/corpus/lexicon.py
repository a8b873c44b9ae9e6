"""The corpus's words: nouns, adjectives, verbs, places and adverbials, with what may combine with what.

Selectional restrictions use plain tags:

* a noun carries class tags (``person child male``, ``animal dog``, ``ball throwable``) and, for things
  that belong somewhere, ``where`` tags naming the places it can be (a cow: meadows, fields, farms);
* a verb names the subject tags and object tags it accepts and the place tags it can happen at;
* a place carries tags (``im Park``: ``park outdoor green``); a place fits a clause when the verb allows
  one of its tags and every noun with ``where`` tags shares one with it.

The tables below are short on purpose: one line per word, read by small parsers at import time.
Every English translation is fixed per German word and context class, so the corpus stays learnable.
"""

from __future__ import annotations

from dataclasses import dataclass

# ---------------------------------------------------------------------------------------------------
# Nouns
# ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Noun:
    """A German noun with its English translation and tags.

    ``oblique`` is the accusative/dative singular of weak masculine nouns (*den Jungen*); ``mass``
    nouns appear without article in the singular (*trinkt heißen Tee*); ``kin`` nouns only appear with
    a possessive (*ihr Sohn*); ``where`` restricts the places the noun fits (empty: anywhere).
    """

    de: str
    gender: str
    de_pl: str | None
    en: str
    en_pl: str | None
    tags: frozenset[str]
    where: frozenset[str] = frozenset()
    oblique: str | None = None
    en_article: str | None = None  # English article for bare German nouns: "spielt Gitarre" -> "the guitar"
    #: adjective key -> (English adjective, English noun) where the pair is an idiom: *heißer Kakao* is "hot
    #: chocolate" (not "hot hot chocolate"), *kalter Kakao* "cold cocoa"
    idioms: tuple[tuple[str, tuple[str, str]], ...] = ()
    genitive: str | None = None  # genitive singular, for nouns that can own things: *des Mannes*, *der Frau*

    @property
    def key(self) -> str:
        return self.de

    def has(self, *tags: str) -> bool:
        return not self.tags.isdisjoint(tags)

    def german(self, plural: bool, case: str) -> str:
        """The German form: dative plural adds -n (*mit den Kindern*), weak nouns take -(e)n."""
        if self.gender == "pl":  # plural-only nouns (Karten, Hausaufgaben)
            return self.de + ("n" if case == "dat" and not self.de.endswith(("n", "s")) else "")
        if plural:
            if self.de_pl is None:
                raise ValueError(f"{self.de} has no plural")
            if case == "dat" and not self.de_pl.endswith(("n", "s")):
                return self.de_pl + "n"
            return self.de_pl
        if case in ("acc", "dat") and self.oblique:
            return self.oblique
        return self.de

    def idiom(self, adjective_key: str) -> tuple[str, str] | None:
        """(English adjective, English noun) when this noun and adjective form an idiom, else None."""
        return dict(self.idioms).get(adjective_key)

    def english(self, plural: bool) -> str:
        if plural:
            if self.en_pl is None:
                raise ValueError(f"{self.en} has no plural")
            return self.en_pl
        return self.en

    @property
    def sex(self) -> str | None:
        """Natural gender of a person, for English his/her; None when English would need 'its'."""
        if "male" in self.tags:
            return "m"
        if "female" in self.tags:
            return "f"
        return None


# Groups of place tags used in ``where`` lists.
_NATURE = "park garden forest meadow field beach lake river sea grass sand snow sun outdoors"
_HOME = "home livingroom kitchen sofa garden window"
_PLACE_GROUPS = {"NATURE": _NATURE, "HOME": _HOME, "FARM": "farm field meadow"}

# German  gender plural | English singular / plural | tags (k=v flags: where=a,b  oblique=Form  article=the)
_NOUN_TABLE = """
Mann m Männer | man / men | person adult male common gen=Mannes
Frau f Frauen | woman / women | person adult female common gen=Frau
Junge m Jungen | boy / boys | person child male common oblique=Jungen gen=Jungen
Mädchen n Mädchen | girl / girls | person child girl common gen=Mädchens
Kind n Kinder | child / children | person child common generic
Baby n Babys | baby / babies | person baby holdable where=HOME,park,beach,sun,grass
Mutter f Mütter | mother / mothers | person adult female parent
Vater m Väter | father / fathers | person adult male parent
Dame f Damen | lady / ladies | person adult old female
Paar n Paare | couple / couples | person adult group
Familie f Familien | family / families | person group
Sohn m Söhne | son / sons | person child male kin
Tochter f Töchter | daughter / daughters | person child female kin
Bruder m Brüder | brother / brothers | person child male kin sibling
Schwester f Schwestern | sister / sisters | person child female kin sibling
Großvater m Großväter | grandfather / grandfathers | person old male kin grandparent
Großmutter f Großmütter | grandmother / grandmothers | person old female kin grandparent
Freund m Freunde | friend / friends | person adult male kin friend
Freundin f Freundinnen | friend / friends | person adult female kin friend
Polizist m Polizisten | police officer / police officers | person adult male job oblique=Polizisten gen=Polizisten
Koch m Köche | cook / cooks | person adult male job
Köchin f Köchinnen | cook / cooks | person adult female job
Lehrer m Lehrer | teacher / teachers | person adult male job gen=Lehrers
Lehrerin f Lehrerinnen | teacher / teachers | person adult female job gen=Lehrerin
Bauer m Bauern | farmer / farmers | person adult male job oblique=Bauern gen=Bauern
Bäuerin f Bäuerinnen | farmer / farmers | person adult female job gen=Bäuerin
Fischer m Fischer | fisherman / fishermen | person adult male job gen=Fischers
Verkäufer m Verkäufer | vendor / vendors | person adult male job seller
Verkäuferin f Verkäuferinnen | vendor / vendors | person adult female job seller
Musiker m Musiker | musician / musicians | person adult male job artiste
Musikerin f Musikerinnen | musician / musicians | person adult female job artiste
Sänger m Sänger | singer / singers | person adult male job artiste
Sängerin f Sängerinnen | singer / singers | person adult female job artiste
Tänzer m Tänzer | dancer / dancers | person adult male job artiste
Tänzerin f Tänzerinnen | dancer / dancers | person adult female job artiste
Künstler m Künstler | artist / artists | person adult male job painter
Künstlerin f Künstlerinnen | artist / artists | person adult female job painter
Arbeiter m Arbeiter | worker / workers | person adult male job worker
Radfahrer m Radfahrer | cyclist / cyclists | person adult male
Tourist m Touristen | tourist / tourists | person adult male oblique=Touristen gen=Touristen
Touristin f Touristinnen | tourist / tourists | person adult female gen=Touristin
Student m Studenten | student / students | person adult male oblique=Studenten
Studentin f Studentinnen | student / students | person adult female
Clown m Clowns | clown / clowns | person adult male artiste
Nachbar m Nachbarn | neighbor / neighbors | person adult male owneronly oblique=Nachbarn gen=Nachbarn
Nachbarin f Nachbarinnen | neighbor / neighbors | person adult female owneronly gen=Nachbarin
Hund m Hunde | dog / dogs | animal dog pet common where=NATURE,HOME,street,sidewalk
Welpe m Welpen | puppy / puppies | animal dog pet young oblique=Welpen where=NATURE,HOME
Katze f Katzen | cat / cats | animal cat pet where=HOME,garden,sun,grass,tree,meadow
Pferd n Pferde | horse / horses | animal horse where=FARM,beach,forest
Pony n Ponys | pony / ponies | animal horse young where=FARM,beach,forest
Kuh f Kühe | cow / cows | animal farmanimal grazer where=FARM
Schaf n Schafe | sheep / sheep | animal farmanimal grazer where=FARM
Ziege f Ziegen | goat / goats | animal farmanimal grazer where=FARM,zoo
Hase m Hasen | rabbit / rabbits | animal pet smallanimal where=garden,meadow,field,grass oblique=Hasen
Affe m Affen | monkey / monkeys | animal zooanimal where=zoo,tree oblique=Affen
Elefant m Elefanten | elephant / elephants | animal zooanimal big where=zoo oblique=Elefanten
Bär m Bären | bear / bears | animal zooanimal big where=zoo,forest,river oblique=Bären
Löwe m Löwen | lion / lions | animal zooanimal big where=zoo oblique=Löwen
Vogel m Vögel | bird / birds | animal bird where=NATURE,tree,window,bridge,sky
Ente f Enten | duck / ducks | animal bird waterbird where=lake,river,park,meadow,water,sky
Schwan m Schwäne | swan / swans | animal bird waterbird where=lake,river,water,sky
Taube f Tauben | pigeon / pigeons | animal bird where=park,street,sidewalk,market,bridge
Möwe f Möwen | seagull / seagulls | animal bird where=beach,sea,water,sky
Eichhörnchen n Eichhörnchen | squirrel / squirrels | animal smallanimal where=park,garden,forest,tree,grass
Maus f Mäuse | mouse / mice | animal smallanimal where=HOME,field,meadow,garden
Fisch m Fische | fish / fish | animal fish where=water,waterside,boat,lake,river,sea
Ball m Bälle | ball / balls | thing ball toy throwable catchable holdable colourful
Frisbee n Frisbees | frisbee / frisbees | thing throwable catchable colourful
Stock m Stöcke | stick / sticks | thing throwable small pickable
Stein m Steine | stone / stones | thing throwable small pickable collectable
Muschel f Muscheln | shell / shells | thing small pickable collectable where=beach,sand,sea
Blatt n Blätter | leaf / leaves | thing small collectable where=park,forest,garden,meadow
Pilz m Pilze | mushroom / mushrooms | thing food collectable where=forest,meadow
Drachen m Drachen | kite / kites | thing kite colourful where=beach,meadow,field,park
Luftballon m Luftballons | balloon / balloons | thing holdable colourful sellable flyerable
Puppe f Puppen | doll / dolls | thing toy holdable
Teddybär m Teddybären | teddy bear / teddy bears | thing toy holdable huggable childonly oblique=Teddybären
Buch n Bücher | book / books | thing readable holdable showable
Zeitung f Zeitungen | newspaper / newspapers | thing readable holdable sellable
Zeitschrift f Zeitschriften | magazine / magazines | thing readable holdable
Brief m Briefe | letter / letters | thing readable writable
Postkarte f Postkarten | postcard / postcards | thing writable sellable flyerable
Geschichte f Geschichten | story / stories | thing story writable
Bild n Bilder | picture / pictures | thing picture drawable showable hangable
Foto n Fotos | photo / photos | thing photo showable
Karte f Karten | map / maps | thing readable showable holdable
Apfel m Äpfel | apple / apples | thing food fruit buyable giveable sellable cuttable horsefood
Banane f Bananen | banana / bananas | thing food fruit buyable sellable monkeyfood
Orange f Orangen | orange / oranges | thing food fruit buyable sellable cuttable
Karotte f Karotten | carrot / carrots | thing food vegetable buyable sellable horsefood cuttable
Eis n - | ice cream / - | thing food sweet buyable sellable giveable mass countsg
Sandwich n Sandwiches | sandwich / sandwiches | thing food buyable preparable
Pizza f Pizzas | pizza / pizzas | thing food bakeable buyable cuttable
Kuchen m Kuchen | cake / cakes | thing food sweet bakeable cuttable
Brot n Brote | loaf of bread / loaves of bread | thing bakeable buyable
Suppe f - | soup / - | thing food cookable preparable mass countsg
Knochen m Knochen | bone / bones | thing dogfood
Tee m - | tea / - | thing drink mass
Kaffee m - | coffee / - | thing drink mass adultonly
Wasser n - | water / - | thing drink mass animaldrink
Saft m - | juice / - | thing drink mass
Milch f - | milk / - | thing drink mass
Limonade f - | lemonade / - | thing drink mass
Gras n - | grass / - | thing fodder mass
Heu n - | hay / - | thing fodder mass
Gemüse n - | vegetables / - | thing food cookable cuttable buyable sellable mass plural_en
Musik f - | music / - | thing music mass
Fußball m - | soccer / - | sport mass where=park,field,beach,street,meadow,playground,grass
Volleyball m - | volleyball / - | sport mass where=beach,gym,park
Basketball m - | basketball / - | sport mass where=gym,playground,street,park
Tennis n - | tennis / - | sport mass where=park,gym
Schach n - | chess / - | game mass where=park,livingroom,table,home,library
Karten pl - | cards / - | game mass plural_de
Gitarre f Gitarren | guitar / guitars | instrument thing holdable article=the
Geige f Geigen | violin / violins | instrument thing holdable article=the
Klavier n Klaviere | piano / pianos | instrument thing bigthing article=the where=stage,livingroom,home,school
Trommel f Trommeln | drum / drums | instrument thing holdable article=the
Flöte f Flöten | flute / flutes | instrument thing holdable article=the
Hut m Hüte | hat / hats | thing clothing headwear colourful sellable
Mütze f Mützen | cap / caps | thing clothing headwear colourful
Jacke f Jacken | jacket / jackets | thing clothing colourful
Mantel m Mäntel | coat / coats | thing clothing colourful
Kleid n Kleider | dress / dresses | thing clothing colourful longable forfemale
Hemd n Hemden | shirt / shirts | thing clothing colourful
Schal m Schals | scarf / scarves | thing clothing colourful longable
Helm m Helme | helmet / helmets | thing clothing headwear colourful
Rucksack m Rucksäcke | backpack / backpacks | thing bag colourful carryable
Tasche f Taschen | bag / bags | thing bag colourful carryable holdable
Koffer m Koffer | suitcase / suitcases | thing bag carryable
Regenschirm m Regenschirme | umbrella / umbrellas | thing holdable colourful carryable
Kiste f Kisten | box / boxes | thing carryable openable
Geschenk n Geschenke | present / presents | thing openable giveable holdable
Blume f Blumen | flower / flowers | thing flower holdable pickable buyable sellable drawable plantable
    colourful flyerable
Baum m Bäume | tree / trees | thing tree climbable plantable drawable where=park,garden,forest,meadow,field
Fahrrad n Fahrräder | bicycle / bicycles | thing vehicle bike pushable fixable washable colourful
    where=NATURE,street,sidewalk,station,market,garage
Auto n Autos | car / cars | thing vehicle car drivable fixable washable drawable colourful
    where=street,garage,garden,field,farm,table,livingroom
Bus m Busse | bus / buses | thing vehicle boardable drivable where=street,busstop,station
Zug m Züge | train / trains | thing vehicle boardable where=station
Traktor m Traktoren | tractor / tractors | thing vehicle drivable fixable where=field,farm
Motorrad n Motorräder | motorcycle / motorcycles | thing vehicle rideable fixable washable
Schlitten m Schlitten | sled / sleds | thing pullable where=snow
Kinderwagen m Kinderwagen | stroller / strollers | thing pushable where=park,street,sidewalk,market
Einkaufswagen m Einkaufswagen | shopping cart / shopping carts | thing pushable where=supermarket
Zaun m Zäune | fence / fences | thing paintable fixable buildable where=garden,field,farm
Haus n Häuser | house / houses | thing building paintable drawable where=garden,street,outdoors
Tür f Türen | door / doors | thing openable paintable
Fenster n Fenster | window / windows | thing openable cleanable
Sandburg f Sandburgen | sandcastle / sandcastles | thing buildable where=beach,sand
Schneemann m Schneemänner | snowman / snowmen | thing buildable where=snow
Loch n Löcher | hole / holes | thing diggable where=sand,beach,garden,field
Zimmer n Zimmer | room / rooms | thing room tidyable
Küche f Küchen | kitchen / kitchens | thing room tidyable cleanable
Wäsche f - | laundry / - | thing laundry hangable mass
Tag m Tage | day / days | thing day needs_adj
Sonne f - | sun / - | thing sun definite_only where=park,garden,beach,meadow,lake,sea,outdoors,sun
Aussicht f - | view / - | thing view needs_adj where=mountain,bridge,beach,waterside,hill
Kochen n - | cooking / - | chore definite_only
Backen n - | baking / - | chore definite_only
Putzen n - | cleaning / - | chore definite_only
Einkaufen n - | shopping / - | chore definite_only
Hausaufgaben pl - | homework / - | chore2 mass plural_de
Kellner m Kellner | waiter / waiters | person adult male job
Kellnerin f Kellnerinnen | waitress / waitresses | person adult female job
Fotograf m Fotografen | photographer / photographers | person adult male job oblique=Fotografen
Gärtner m Gärtner | gardener / gardeners | person adult male job worker gen=Gärtners
Gärtnerin f Gärtnerinnen | gardener / gardeners | person adult female job worker gen=Gärtnerin
Bäcker m Bäcker | baker / bakers | person adult male job
Mechaniker m Mechaniker | mechanic / mechanics | person adult male job worker
Läufer m Läufer | runner / runners | person adult male sporty
Läuferin f Läuferinnen | runner / runners | person adult female sporty
Schwimmer m Schwimmer | swimmer / swimmers | person adult male sporty
Wanderer m Wanderer | hiker / hikers | person adult male sporty
Wanderin f Wanderinnen | hiker / hikers | person adult female sporty
Teenager m Teenager | teenager / teenagers | person adult male young
Rentner m Rentner | retiree / retirees | person adult old male
Rentnerin f Rentnerinnen | retiree / retirees | person adult old female
Feuerwehrmann m Feuerwehrleute | firefighter / firefighters | person adult male job
Pinguin m Pinguine | penguin / penguins | animal zooanimal where=zoo
Giraffe f Giraffen | giraffe / giraffes | animal zooanimal big where=zoo
Zebra n Zebras | zebra / zebras | animal zooanimal where=zoo
Kamel n Kamele | camel / camels | animal zooanimal big where=zoo,desert
Tiger m Tiger | tiger / tigers | animal zooanimal big where=zoo
Robbe f Robben | seal / seals | animal zooanimal where=zoo,beach,sea,water
Esel m Esel | donkey / donkeys | animal farmanimal grazer where=FARM,beach
Schwein n Schweine | pig / pigs | animal farmanimal where=FARM
Huhn n Hühner | chicken / chickens | animal farmanimal bird where=FARM,garden
Gans f Gänse | goose / geese | animal farmanimal bird waterbird where=FARM,lake,river,water
Frosch m Frösche | frog / frogs | animal smallanimal where=lake,garden,pond,grass
Schmetterling m Schmetterlinge | butterfly / butterflies | animal smallanimal where=garden,meadow,park
Schneeball m Schneebälle | snowball / snowballs | thing throwable where=snow
Comic m Comics | comic / comics | thing readable holdable
Speisekarte f Speisekarten | menu / menus | thing readable holdable where=restaurant
Würstchen n Würstchen | sausage / sausages | thing food grillable buyable
Keks m Kekse | cookie / cookies | thing food sweet bakeable buyable giveable flyerable
Erdbeere f Erdbeeren | strawberry / strawberries | thing food fruit buyable sellable
Birne f Birnen | pear / pears | thing food fruit buyable sellable cuttable horsefood
Tomate f Tomaten | tomato / tomatoes | thing food vegetable buyable sellable cuttable
Kartoffel f Kartoffeln | potato / potatoes | thing food vegetable buyable sellable cuttable
Brezel f Brezeln | pretzel / pretzels | thing food buyable sellable bakeable
Hamburger m Hamburger | hamburger / hamburgers | thing food buyable grillable
Salat m Salate | salad / salads | thing food preparable
Pfannkuchen m Pfannkuchen | pancake / pancakes | thing food sweet bakeable
Kakao m - | hot chocolate / - | thing drink mass idiom=heiß:hot_chocolate,kalt:cold_cocoa
Stiefel m Stiefel | boot / boots | thing clothing colourful pairnoun
Pullover m Pullover | sweater / sweaters | thing clothing colourful
Rock m Röcke | skirt / skirts | thing clothing colourful forfemale
Krawatte f Krawatten | tie / ties | thing clothing colourful
Schürze f Schürzen | apron / aprons | thing clothing colourful
Weste f Westen | vest / vests | thing clothing colourful
Uniform f Uniformen | uniform / uniforms | thing clothing
Trompete f Trompeten | trumpet / trumpets | instrument thing holdable article=the
Saxofon n Saxofone | saxophone / saxophones | instrument thing holdable article=the
Seil n Seile | rope / ropes | thing holdable pullable
Schaufel f Schaufeln | shovel / shovels | thing holdable carryable
Besen m Besen | broom / brooms | thing holdable
Eimer m Eimer | bucket / buckets | thing holdable carryable colourful
Leiter f Leitern | ladder / ladders | thing climbable carryable
Kamera f Kameras | camera / cameras | thing holdable
Handy n Handys | phone / phones | thing holdable
Laptop m Laptops | laptop / laptops | thing laptop
Schild n Schilder | sign / signs | thing holdable colourful
Fahne f Fahnen | flag / flags | thing holdable colourful
Tasse f Tassen | cup / cups | thing holdable vessel
Glas n Gläser | glass / glasses | thing holdable vessel
Flasche f Flaschen | bottle / bottles | thing holdable vessel
Korb m Körbe | basket / baskets | thing holdable carryable vessel
Mikrofon n Mikrofone | microphone / microphones | thing holdable where=stage,street,park
Turm m Türme | tower / towers | thing buildable where=livingroom,sand,beach,home
Lied n Lieder | song / songs | thing song
Rasen m Rasen | lawn / lawns | thing mowable where=garden,park
Boden m Böden | floor / floors | thing sweepable
Fahrkarte f Fahrkarten | ticket / tickets | thing buyable where=station,busstop
Fangen n - | tag / - | game groupgame mass where=park,playground,garden,meadow,beach,grass
Verstecken n - | hide-and-seek / - | game groupgame mass where=park,playground,garden,forest,livingroom,home
"""


def _rows(table: str) -> list[str]:
    """The rows of a table; an indented line continues the row above it (long tag lists)."""
    rows: list[str] = []
    for line in table.strip().splitlines():
        if line[:1].isspace() and rows:
            rows[-1] += " " + line.strip()
        else:
            rows.append(line)
    return rows


def _expand_where(value: str) -> frozenset[str]:
    tags: list[str] = []
    for item in value.split(","):
        tags.extend(_PLACE_GROUPS[item].split() if item in _PLACE_GROUPS else [item])
    return frozenset(tags)


def _parse_nouns(table: str) -> dict[str, Noun]:
    nouns: dict[str, Noun] = {}
    for line in _rows(table):
        german, english, tag_text = (part.strip() for part in line.split("|"))
        de, gender, de_pl = german.split()
        en, en_pl = (w.strip() for w in english.split("/"))
        tags, flags = [], {}
        for item in tag_text.split():
            if "=" in item:
                k, v = item.split("=", 1)
                flags[k] = v
            else:
                tags.append(item)
        if "unused" in tags:
            continue
        nouns[de] = Noun(
            de=de,
            gender=gender,
            de_pl=None if de_pl == "-" else de_pl,
            en=en,
            en_pl=None if en_pl == "-" else en_pl,
            tags=frozenset(tags),
            where=_expand_where(flags["where"]) if "where" in flags else frozenset(),
            oblique=flags.get("oblique"),
            en_article=flags.get("article"),
            idioms=tuple(
                (adj, tuple(words.split("_", 1)))  # type: ignore[misc]
                for adj, words in (item.split(":") for item in flags["idiom"].split(","))
            )
            if "idiom" in flags
            else (),
            genitive=flags.get("gen"),
        )
    return nouns


NOUNS: dict[str, Noun] = _parse_nouns(_NOUN_TABLE)

# ---------------------------------------------------------------------------------------------------
# Adjectives
# ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Adjective:
    """A German adjective: ``stem`` takes the endings; ``en`` maps a noun tag to the English word
    (first match wins, ``*`` is the default); it modifies nouns with one of ``applies`` and none
    of ``excludes``."""

    key: str
    stem: str
    en: tuple[tuple[str, str], ...]
    applies: frozenset[str]
    excludes: frozenset[str]

    def fits(self, noun: Noun) -> bool:
        """Tags may also name a noun directly (``Schaf``), for one-off pairs."""
        labels = noun.tags | {noun.de}
        return bool(self.applies & labels) and not (self.excludes & labels)

    def english(self, noun: Noun) -> str:
        for tag, word in self.en:
            if tag == "*" or tag in noun.tags:
                return word
        raise ValueError(f"no English for {self.key} with {noun.de}")


# base (stem) | English (tag:word ..., * default) | applies to tags | -excluded tags
_ADJECTIVE_TABLE = """
klein | *:little thing:small | child baby animal ball toy bag picture photo tree flower kite Luftballon
    Geschenk Kiste Loch Turm Sandburg Schneemann Stein Stock Muschel Kuchen Pizza Auto Fahrrad Hut Eimer Zimmer
    Haus | -big -room -readable -story -mass -sun -drink -fodder -music -laundry -Zug -day -view -bigthing
    -building -sandcastle
groß | person:tall *:big | adult animal ball dog vehicle tree building bag kite Kiste room | -small
    -smallanimal -young -kin -baby -group -bird -fish -parent
alt | *:old | adult animal car tree bike building | -young -old -kin -job -bird -fish -group -smallanimal
    -parent -Student -Studentin
jung | *:young | adult | -old -young -kin -job
älter | *:elderly | adult | -kin -job -group -young -old -parent -Student -Studentin
hübsch | *:pretty | girl female | -old -kin -job -group
glücklich | *:happy | person dog | -kin -group -baby
fröhlich | *:cheerful | person | -kin -baby -group
müde | *:tired | person dog horse | -kin
hungrig | *:hungry | animal baby | -fish
nass | *:wet | dog |
schnell | *:fast | dog horse car motorcycle |
braun | *:brown | dog horse cat bag Hut Mantel Kuh |
schwarz | *:black | dog horse cat clothing bag car bike umbrella |
weiß | *:white | dog horse cat clothing car bike Haus Schaf |
grau | *:gray | cat dog horse Mantel Hut car | -young
rot | *:red | ball clothing car bike bag Regenschirm flower kite Luftballon Tür |
blau | *:blue | ball clothing car bike bag Regenschirm flower kite Luftballon Tür |
grün | *:green | ball clothing car bike bag Regenschirm kite Luftballon Tür Traktor |
gelb | *:yellow | ball clothing car bike bag Regenschirm flower kite Luftballon |
bunt | *:colorful | kite Luftballon clothing Regenschirm | Helm
neu | *:new | clothing bag car bike Buch Puppe |
lang | *:long | longable Brief |
frisch | *:fresh | fruit Brot vegetable | -mass
heiß | *:hot | drink Suppe | Saft Limonade Wasser
kalt | *:cold | drink | Tee Kaffee
rund | *:round | ball |
dick | *:thick | Buch |
schön | *:beautiful | day view flower picture Kleid Haus |
sonnig | *:sunny | day |
warm | *:warm | day Mantel Jacke |
schwer | *:heavy | bag Kiste |
dunkel | *:dark | Mantel Anzug Hut Pullover |
teuer | *:expensive | car bike Kamera Handy Laptop Uhr Kleid |
lustig | *:funny | Hut Clown |
freundlich | *:friendly | adult dog | -kin -group
stolz | *:proud | parent |
leer | *:empty | vessel | -Korb
sauber | *:clean | clothing car |
schmutzig | *:dirty | dog clothing car Stiefel |
süß | *:cute | Welpe Baby Hase Katze Schwein |
winzig | *:tiny | smallanimal bird |
riesig | *:huge | Elefant Giraffe Sandburg Schneemann Turm |
silbern | *:silver | car Fahrrad Motorrad |
bärtig | *:bearded | male | -child -kin -young -Junge -Teenager
blond | *:blond | female girl Junge Teenager | -kin -old
sportlich | *:athletic | adult | -kin -old -job -group
stark | *:strong | Mann Pferd Arbeiter Feuerwehrmann |
"""


# Stems that drop an unstressed e before an ending (dunkel -> dunkle, teuer -> teure).
_STEMS = {"dunkel": "dunkl", "teuer": "teur"}


def _parse_adjectives(table: str) -> dict[str, Adjective]:
    adjectives: dict[str, Adjective] = {}
    for line in _rows(table):
        base, english, applies, excludes = (part.strip() for part in line.split("|"))
        en = tuple(tuple(item.split(":", 1)) for item in english.split())
        adjectives[base] = Adjective(
            key=base,
            stem=_STEMS.get(base, base[:-1] if base.endswith("e") else base),  # müde -> müd-er
            en=tuple(sorted(en, key=lambda item: item[0] == "*")),  # type: ignore[arg-type]
            applies=frozenset(applies.split()),
            excludes=frozenset(t.lstrip("-") for t in excludes.split()),
        )
    return adjectives


ADJECTIVES: dict[str, Adjective] = _parse_adjectives(_ADJECTIVE_TABLE)

# ---------------------------------------------------------------------------------------------------
# Places: where a clause happens (dative), where a movement goes (accusative), idioms
# ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Place:
    """A prepositional phrase of place or direction.

    Either built from ``noun`` with German preposition ``de_prep`` (governing ``case``) and English
    preposition ``en_prep`` — the article (``det``: ``def``/``indef``) is declined and contracted
    (*in dem → im*) by the grammar — or a fixed idiom: ``fixed`` pairs of German words and the English
    words they translate (*im Freien → outdoors*).
    """

    key: str
    tags: frozenset[str]
    noun: Noun | None = None
    de_prep: str = ""
    en_prep: str = ""
    case: str = "dat"
    det: str = "def"
    en_article: bool = True
    fixed: tuple[tuple[str, str], ...] = ()


# kind | German preposition + noun (+ det) | English preposition | tags
# "fixed" rows: German=English pieces, words of one piece joined by "_" (they align as a block).
_PLACE_TABLE = """
loc | in Park | in | park outdoor green
loc | in Garten | in | garden outdoor green
loc | in Wald | in | forest outdoor green
loc | auf Wiese | in | meadow outdoor green
loc | auf Feld | in | field outdoor green farm
loc | an Strand | on | beach outdoor sand
loc | an See | by | lake waterside outdoor
loc | in See | in | lake water
loc | an Fluss | by | river waterside outdoor
loc | in Fluss | in | river water
loc | an Meer | by | sea waterside outdoor beach
loc | in Meer | in | sea water seawater
loc | auf Straße | on | street outdoor
loc | auf Bürgersteig | on | sidewalk outdoor
loc | auf Markt | at | market outdoor
loc | in Supermarkt | at | supermarket indoor
loc | in Küche | in | kitchen indoor
loc | in Wohnzimmer | in | livingroom indoor
loc | auf Bühne | on | stage
loc | in Schnee | in | snow outdoor
loc | in Sand | in | sand outdoor
loc | auf Spielplatz | on | playground outdoor green
loc | an Bahnhof | at | station
loc | an Haltestelle | at | busstop
loc | auf Berg indef | on | mountain outdoor
loc | auf Brücke | on | bridge outdoor
loc | auf Bank indef | on | bench outdoor
loc | auf Sofa | on | sofa indoor
loc | an Tisch | at | table indoor
loc | an Fenster | by | window indoor
loc | unter Baum indef | under | tree outdoor green shade
loc | in Restaurant | in | restaurant indoor
loc | in Bibliothek | in | library indoor
loc | in Zoo | at | zoo outdoor
loc | auf Bauernhof indef | on | farm outdoor
loc | in Turnhalle | in | gym indoor
loc | in Büro | in | office indoor
loc | in Boot indef | in | boat
loc | in Sonne | in | sun outdoor
loc | in Gras | in | grass outdoor green
loc | vor Kirche | in_front_of | church outdoor front
loc | vor Museum | in_front_of | museum outdoor front
loc | an Brunnen indef | by | fountain outdoor
loc | in Hafen | in | harbor outdoor waterside
loc | in Wüste | in | desert outdoor
loc | in Stadion | in | stadium
loc | in Garage | in | garage indoor
loc | vor Zelt indef | in_front_of | tent outdoor front
loc | an Ufer | on | shore waterside outdoor
loc | auf Hügel indef | on | hill outdoor green
loc | in Pfütze indef | in | puddle outdoor
loc | in Bäckerei indef | in | bakery indoor
loc | auf Schaukel indef | on | swing
loc | in Kanu indef | in | boat
loc | auf See | on | lakesurface
loc | auf Fluss | on | lakesurface
loc | auf Meer | on | lakesurface
fixed | im_Freien=outdoors | | outdoors outdoor green
fixed | zu=at Hause=home | | home indoor
fixed | in_der=at Schule=school | | school indoor
fixed | im=in Bett=bed | | bed
dir | in Wasser | into | dirwater
dir | in See | into | dirwater lake
dir | über Straße | across | across street city
dir | über Wiese | across | across meadow
dir | über Brücke | across | across bridge city
dir | über See | across | acrosswater lake
dir | durch Park | through | through park
dir | durch Wald | through | through forest
dir | durch Schnee | through | through snow
dir | auf Bühne | onto | onto stage
dir | über Brücke | over | flyover sky bridge
dir | über Wiese | over | flyover sky meadow
dir | über See | over | flyover sky lake
dir | über Park | over | flyover sky park
dir | über Strand | over | flyover sky beach
dir | über Meer | over | flyover sky sea
goal | zu Strand | to | goal beach
goal | zu Bahnhof | to | goal station city
goal | zu Haltestelle | to | goal busstop city
fixed | zur=to Schule=school | | goal school
fixed | nach_Hause=home | | goal home
fixed | in_die_Stadt=into_town | | goal city
"""

# Nouns used only as places (never as subjects or objects).
_PLACE_NOUNS = """
Park m Parks | park / parks | place
Garten m Gärten | garden / gardens | place
Wald m Wälder | forest / forests | place
Wiese f Wiesen | meadow / meadows | place
Feld n Felder | field / fields | place
Strand m Strände | beach / beaches | place
See m Seen | lake / lakes | place
Fluss m Flüsse | river / rivers | place
Meer n Meere | sea / seas | place
Straße f Straßen | street / streets | place
Bürgersteig m Bürgersteige | sidewalk / sidewalks | place
Markt m Märkte | market / markets | place
Supermarkt m Supermärkte | supermarket / supermarkets | place
Wohnzimmer n Wohnzimmer | living room / living rooms | place
Bühne f Bühnen | stage / stages | place
Schnee m - | snow / - | place
Sand m - | sand / - | place
Spielplatz m Spielplätze | playground / playgrounds | place
Bahnhof m Bahnhöfe | station / stations | place
Haltestelle f Haltestellen | bus stop / bus stops | place
Berg m Berge | mountain / mountains | place
Brücke f Brücken | bridge / bridges | place
Bank f Bänke | bench / benches | place
Sofa n Sofas | sofa / sofas | place
Tisch m Tische | table / tables | place
Restaurant n Restaurants | restaurant / restaurants | place
Bibliothek f Bibliotheken | library / libraries | place
Zoo m Zoos | zoo / zoos | place
Bauernhof m Bauernhöfe | farm / farms | place
Turnhalle f Turnhallen | gym / gyms | place
Büro n Büros | office / offices | place
Boot n Boote | boat / boats | place
Kirche f Kirchen | church / churches | place
Museum n Museen | museum / museums | place
Brunnen m Brunnen | fountain / fountains | place
Hafen m Häfen | harbor / harbors | place
Wüste f Wüsten | desert / deserts | place
Stadion n Stadien | stadium / stadiums | place
Garage f Garagen | garage / garages | place
Zelt n Zelte | tent / tents | place
Ufer n Ufer | shore / shores | place
Hügel m Hügel | hill / hills | place
Pfütze f Pfützen | puddle / puddles | place
Bäckerei f Bäckereien | bakery / bakeries | place
Schaukel f Schaukeln | swing / swings | place
Kanu n Kanus | canoe / canoes | place
"""

PLACE_NOUNS: dict[str, Noun] = _parse_nouns(_PLACE_NOUNS)


def _parse_places(table: str) -> dict[str, list[Place]]:
    places: dict[str, list[Place]] = {"loc": [], "dir": [], "goal": []}
    for line in _rows(table):
        kind, german, en_prep, tags = (part.strip() for part in line.split("|"))
        tag_set = frozenset(tags.split())
        if kind == "fixed":
            pieces = tuple(
                (de.replace("_", " "), en.replace("_", " "))
                for de, en in (piece.split("=") for piece in german.split())
            )
            target = "goal" if "goal" in tag_set else "loc"
            places[target].append(Place(key=german, tags=tag_set, fixed=pieces))
            continue
        words = german.split()
        prep, noun_key = words[0], words[1]
        det = words[2] if len(words) > 2 else "def"
        noun = PLACE_NOUNS.get(noun_key) or NOUNS[noun_key]
        case = "acc" if kind == "dir" else "dat"
        places[kind].append(
            Place(
                key=f"{kind}:{german}",
                tags=tag_set,
                noun=noun,
                de_prep=prep,
                en_prep=en_prep.replace("_", " "),
                case=case,
                det=det,
            )
        )
    return places


PLACES: dict[str, list[Place]] = _parse_places(_PLACE_TABLE)

# ---------------------------------------------------------------------------------------------------
# Fronted time adverbials (verb-second: "Am Morgen liest ein Mann ...")
# ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TimeAdverbial:
    """A time adverbial; ``morning``: breakfast may happen then (*frühstückt* takes no other time)."""

    pieces: tuple[tuple[str, str], ...]  # (German words, English words) aligned blocks
    subject_tags: frozenset[str] = frozenset()  # empty: any subject
    weight: int = 2  # relative frequency: captions rarely say "today" or "on the weekend"
    morning: bool = False
    verb_excludes: frozenset[str] = frozenset()  # verb keys that make no sense with it

    @property
    def key(self) -> str:
        return " ".join(de for de, _ in self.pieces)


TIME_ADVERBIALS: tuple[TimeAdverbial, ...] = (
    TimeAdverbial((("am", "in the"), ("Morgen", "morning")), weight=3, morning=True),
    TimeAdverbial((("früh", "early in the"), ("morgens", "morning")), weight=1, morning=True),
    TimeAdverbial((("am", "in the"), ("Nachmittag", "afternoon")), weight=3),
    TimeAdverbial((("am", "in the"), ("Abend", "evening")), weight=3),
    TimeAdverbial((("heute", "today"),), weight=1),
    TimeAdverbial((("am", "on the"), ("Wochenende", "weekend")), weight=1),
    TimeAdverbial((("an einem", "on a"), ("sonnigen", "sunny"), ("Tag", "day")), weight=2),
    TimeAdverbial((("im", "in the"), ("Sommer", "summer")), weight=1, verb_excludes=frozenset({"Ski", "rutschen"})),
    TimeAdverbial((("nach der", "after"), ("Schule", "school")), frozenset({"child"}), weight=2),
    TimeAdverbial((("nach dem", "after"), ("Frühstück", "breakfast")), frozenset({"person"}), weight=1),
)

# ---------------------------------------------------------------------------------------------------
# Verbs
# ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Slot:
    """One complement of a verb: a noun phrase in ``case``, optionally inside a preposition.

    ``de_prep``/``en_prep``: the prepositions (``en_prep=""`` when English has none: *klettert auf
    einen Baum → is climbing a tree*; the German preposition then aligns with the verb).
    ``dets``: which determiners may introduce it (``indef def poss num bare``).
    ``after_place``: placed after the place phrase in German (*wartet an der Haltestelle auf den Bus*).
    """

    case: str
    tags: frozenset[str]
    de_prep: str = ""
    en_prep: str = ""
    dets: tuple[str, ...] = ("indef", "def", "poss")
    after_place: bool = False
    distributive: bool = False  # a plural subject gets a plural object: "Zwei Männer tragen Hüte"
    en_to: bool = False  # English puts this complement last with "to": "reads a book to her son"
    excludes: frozenset[str] = (
        frozenset()
    )  # nouns with one of these tags never fill the slot (hats are not "angezogen")


@dataclass(frozen=True)
class Verb:
    """A verb (or a fixed verb phrase) with its forms, frame and selectional restrictions.

    ``particle``: separable prefix sent to the end of a main clause (*steigt ... ein*) and joined in a
    subordinate clause (*einsteigt*) unless ``particle_apart`` (*spazieren geht*).
    ``fixed``: German/English word blocks after the complements (*Fahrrad → a bike*, *Ski → ...*).
    """

    key: str
    de3sg: str
    de3pl: str
    participle: str
    aux: str  # "haben" or "sein"
    en_ing: str
    en_pp: str
    subject: frozenset[str]
    slots: tuple[Slot, ...] = ()
    fixed: tuple[tuple[str, str], ...] = ()
    particle: str = ""
    particle_apart: bool = False
    places: frozenset[str] = frozenset()
    dirs: frozenset[str] = frozenset()
    perfect: bool = True
    roles: frozenset[str] = frozenset()
    subject_excludes: frozenset[str] = frozenset()

    def _english(self, index: int) -> str:
        first, *rest = self.en_ing.split()
        return " ".join([ENGLISH_VERB[first][index], *rest])

    @property
    def en_base(self) -> str:
        """The bare infinitive after a modal: *can ride*, *wants to take a picture of*."""
        return self._english(0)

    @property
    def en_past(self) -> str:
        """The simple past, English's usual tense for a finished activity that German puts in the perfect."""
        return self._english(1)

    def en_present(self, plural: bool) -> str:
        """The simple present (habits, *when* clauses): *plays* / *play*."""
        first, *rest = self.en_base.split()
        return " ".join([first if plural else english_third_person(first), *rest])

    @property
    def de_infinitive(self) -> list[str]:
        """The infinitive at the end of a modal clause: *einsteigen* (joined), *spazieren gehen* (apart)."""
        if self.particle and not self.particle_apart:
            return [self.particle + self.de3pl]
        return [*self.participle.split()[:-1], self.de3pl] if self.particle_apart else [self.de3pl]


#: English base form and simple past of the first word of each -ing form (the rest of the phrase stays:
#: "taking a picture of" -> "take a picture of" / "took a picture of"). Written out, not derived by rule,
#: because English doubles consonants and drops e's irregularly (running -> run, dancing -> dance).
ENGLISH_VERB: dict[str, tuple[str, str]] = {
    ing: (base, past)
    for ing, base, past in (
        entry.split(":")
        for entry in [
            "baking:bake:baked",
            "barking:bark:barked",
            "brushing:brush:brushed",
            "building:build:built",
            "buying:buy:bought",
            "carrying:carry:carried",
            "catching:catch:caught",
            "chasing:chase:chased",
            "cheering:cheer:cheered",
            "clapping:clap:clapped",
            "cleaning:clean:cleaned",
            "climbing:climb:climbed",
            "collecting:collect:collected",
            "cooking:cook:cooked",
            "crying:cry:cried",
            "cutting:cut:cut",
            "dancing:dance:danced",
            "digging:dig:dug",
            "diving:dive:dived",
            "doing:do:did",
            "drawing:draw:drew",
            "drinking:drink:drank",
            "driving:drive:drove",
            "eating:eat:ate",
            "enjoying:enjoy:enjoyed",
            "feeding:feed:fed",
            "filling:fill:filled",
            "fishing:fish:fished",
            "fixing:fix:fixed",
            "flying:fly:flew",
            "getting:get:got",
            "giving:give:gave",
            "grazing:graze:grazed",
            "grilling:grill:grilled",
            "handing:hand:handed",
            "hanging:hang:hung",
            "having:have:had",
            "helping:help:helped",
            "hiking:hike:hiked",
            "holding:hold:held",
            "hugging:hug:hugged",
            "jogging:jog:jogged",
            "jumping:jump:jumped",
            "laughing:laugh:laughed",
            "listening:listen:listened",
            "looking:look:looked",
            "mowing:mow:mowed",
            "opening:open:opened",
            "paddling:paddle:paddled",
            "painting:paint:painted",
            "petting:pet:petted",
            "picking:pick:picked",
            "planting:plant:planted",
            "playing:play:played",
            "preparing:prepare:prepared",
            "pulling:pull:pulled",
            "pushing:push:pushed",
            "putting:put:put",
            "reading:read:read",
            "riding:ride:rode",
            "rowing:row:rowed",
            "running:run:ran",
            "sailing:sail:sailed",
            "scoring:score:scored",
            "selling:sell:sold",
            "shopping:shop:shopped",
            "showing:show:showed",
            "singing:sing:sang",
            "sitting:sit:sat",
            "skateboarding:skateboard:skateboarded",
            "skiing:ski:skied",
            "sleeping:sleep:slept",
            "sliding:slide:slid",
            "smiling:smile:smiled",
            "standing:stand:stood",
            "studying:study:studied",
            "surfing:surf:surfed",
            "sweeping:sweep:swept",
            "swimming:swim:swam",
            "swinging:swing:swung",
            "taking:take:took",
            "talking:talk:talked",
            "telling:tell:told",
            "throwing:throw:threw",
            "tidying:tidy:tidied",
            "visiting:visit:visited",
            "waiting:wait:waited",
            "walking:walk:walked",
            "washing:wash:washed",
            "watching:watch:watched",
            "watering:water:watered",
            "waving:wave:waved",
            "wearing:wear:wore",
            "whistling:whistle:whistled",
            "working:work:worked",
            "writing:write:wrote",
        ]
    )
}


def english_third_person(base: str) -> str:
    """*plays*, *watches*, *carries*, *does*, *has*: the simple present after he/she/it."""
    if base == "have":
        return "has"
    if base.endswith(("s", "sh", "ch", "x", "o")):
        return base + "es"
    if base.endswith("y") and base[-2:-1] not in "aeiou":
        return base[:-1] + "ies"
    return base + "s"


def _t(text: str) -> frozenset[str]:
    return frozenset(text.split())


def _verb(
    key: str,
    forms: str,
    english: str,
    subject: str,
    *,
    slots: tuple[Slot, ...] = (),
    fixed: str = "",
    particle: str = "",
    places: str = "",
    dirs: str = "",
    perfect: bool = True,
    roles: str = "",
    not_subject: str = "",
    particle_apart: bool = False,
) -> Verb:
    """``forms``: "3sg 3pl participle haben|sein"; ``english``: "ing-form / past participle"."""
    de3sg, de3pl, participle, aux = forms.split()
    en_ing, en_pp = (w.strip() for w in english.split("/"))
    fixed_pieces = tuple(
        (de.replace("_", " "), en.replace("_", " ")) for de, en in (piece.split("=") for piece in fixed.split())
    )
    return Verb(
        key=key,
        de3sg=de3sg,
        de3pl=de3pl,
        participle=participle.replace("_", " "),
        aux=aux,
        en_ing=en_ing,
        en_pp=en_pp,
        subject=_t(subject),
        slots=slots,
        fixed=fixed_pieces,
        particle=particle,
        particle_apart=particle_apart,
        places=_t(places),
        dirs=_t(dirs),
        perfect=perfect,
        roles=_t(roles),
        subject_excludes=_t(not_subject),
    )


_PEOPLE = "adult child"  # subjects that can do most things
_OUTSIDE = "park garden forest meadow field beach lake waterside outdoors grass"
_PLAY = "park garden meadow beach sand snow playground outdoors grass livingroom"
_SIT = "bench sofa table window shade grass sun beach bridge stage busstop station fountain shore hill front"

VERBS: tuple[Verb, ...] = (
    # --- intransitive, with places -------------------------------------------------------------
    _verb("spielen", "spielt spielen gespielt haben", "playing / played", "child dog cat", places=_PLAY, roles="while"),
    _verb(
        "laufen",
        "läuft laufen gelaufen sein",
        "running / run",
        "adult child dog horse",
        places="park forest meadow field beach street",
        dirs="across through goal",
        roles="while",
        not_subject="old group",
    ),
    _verb(
        "gehen",
        "geht gehen gegangen sein",
        "walking / walked",
        "adult child",
        dirs="across through goal",
        not_subject="group",
        roles="needplace",
    ),
    _verb(
        "schwimmen",
        "schwimmt schwimmen geschwommen sein",
        "swimming / swum",
        "adult child dog waterbird",
        places="water",
        dirs="acrosswater",
        roles="show while",
        not_subject="old group",
    ),
    _verb(
        "springen",
        "springt springen gesprungen sein",
        "jumping / jumped",
        "adult child dog",
        dirs="dirwater",
        roles="show needplace",
        not_subject="old group",
    ),
    _verb(
        "tanzen",
        "tanzt tanzen getanzt haben",
        "dancing / danced",
        "adult child",
        places="stage livingroom street beach park outdoors",
        roles="show while",
    ),
    _verb(
        "singen",
        "singt singen gesungen haben",
        "singing / sung",
        "adult child",
        places="stage kitchen park outdoors livingroom",
        roles="show manner while",
    ),
    _verb(
        "schlafen",
        "schläft schlafen geschlafen haben",
        "sleeping / slept",
        "person animal",
        places="sofa shade sun grass bed livingroom meadow",
        perfect=False,
        roles="while",
        not_subject="group",
    ),
    _verb(
        "sitzen",
        "sitzt sitzen gesessen haben",
        "sitting / sat",
        "person dog cat",
        places=_SIT,
        perfect=False,
        roles="needplace while calm",
        not_subject="baby",
    ),
    _verb(
        "stehen",
        "steht stehen gestanden haben",
        "standing / stood",
        "adult child horse",
        places="busstop station stage bridge window street",
        perfect=False,
        roles="needplace calm",
    ),
    _verb(
        "warten",
        "wartet warten gewartet haben",
        "waiting / waited",
        "adult child dog",
        places="busstop station street",
        perfect=False,
        roles="calm",
    ),
    _verb(
        "warten_auf",
        "wartet warten gewartet haben",
        "waiting / waited",
        "adult child",
        slots=(Slot("acc", _t("boardable"), "auf", "for", ("def",), after_place=True),),
        places="busstop station",
        perfect=False,
        roles="calm",
    ),
    _verb("lachen", "lacht lachen gelacht haben", "laughing / laughed", "person", perfect=False, roles="react manner"),
    _verb(
        "lächeln", "lächelt lächeln gelächelt haben", "smiling / smiled", "person", perfect=False, roles="react manner"
    ),
    _verb("jubeln", "jubelt jubeln gejubelt haben", "cheering / cheered", "adult child", perfect=False, roles="react"),
    _verb(
        "klatschen",
        "klatscht klatschen geklatscht haben",
        "clapping / clapped",
        "adult child",
        perfect=False,
        roles="react",
    ),
    _verb(
        "winken",
        "winkt winken gewinkt haben",
        "waving / waved",
        "adult child",
        places="window bridge busstop station street",
        perfect=False,
        roles="manner",
    ),
    _verb("pfeifen", "pfeift pfeifen gepfiffen haben", "whistling / whistled", "adult", perfect=False, roles="manner"),
    _verb("weinen", "weint weinen geweint haben", "crying / cried", "child baby", perfect=False, roles="sad"),
    _verb(
        "bellen",
        "bellt bellen gebellt haben",
        "barking / barked",
        "dog",
        places="garden park street beach window",
        perfect=False,
    ),
    _verb("fliegen", "fliegt fliegen geflogen sein", "flying / flown", "bird", dirs="flyover", not_subject="Huhn"),
    _verb(
        "grasen",
        "grast grasen gegrast haben",
        "grazing / grazed",
        "grazer horse",
        places="meadow field farm",
        perfect=False,
    ),
    _verb(
        "surfen",
        "surft surfen gesurft haben",
        "surfing / surfed",
        "adult child",
        places="seawater",
        roles="show",
        not_subject="old group",
    ),
    _verb(
        "angeln",
        "angelt angeln geangelt haben",
        "fishing / fished",
        "adult child",
        places="waterside boat",
        roles="while",
        not_subject="group",
        perfect=False,
    ),
    _verb(
        "arbeiten",
        "arbeitet arbeiten gearbeitet haben",
        "working / worked",
        "adult",
        places="garden kitchen field office farm",
        roles="while",
    ),
    _verb(
        "telefonieren",
        "telefoniert telefonieren telefoniert haben",
        "talking on the phone / talked on the phone",
        "adult child",
        places="street park kitchen office station busstop",
        perfect=False,
        roles="while calm",
        not_subject="group",
    ),
    _verb(
        "frühstücken",
        "frühstückt frühstücken gefrühstückt haben",
        "having breakfast / had breakfast",
        "person",
        places="kitchen garden restaurant outdoors table",
        roles="while calm morning",
        not_subject="baby",
    ),
    _verb(
        "kochen",
        "kocht kochen gekocht haben",
        "cooking / cooked",
        "adult",
        places="kitchen home outdoors restaurant",
        roles="while",
    ),
    _verb(
        "einkaufen",
        "kauft kaufen eingekauft haben",
        "shopping / shopped",
        "adult",
        particle="ein",
        places="supermarket market",
        perfect=False,
        roles="while",
    ),
    _verb(
        "zuschauen",
        "schaut schauen zugeschaut haben",
        "watching / watched",
        "adult child",
        particle="zu",
        perfect=False,
        roles="calm watch matrixonly",
    ),
    _verb(
        "spazieren",
        "geht gehen spazieren_gegangen sein",
        "taking a walk / taken a walk",
        "adult",
        particle="spazieren",
        particle_apart=True,
        places="park forest beach outdoors",
        roles="while",
        not_subject="group",
    ),
    _verb(
        "Ski",
        "fährt fahren Ski_gefahren sein",
        "skiing / skied",
        "adult child",
        fixed="Ski=",
        places="mountain snow",
        perfect=False,
        roles="show",
    ),
    _verb(
        "Fahrrad",
        "fährt fahren gefahren sein",
        "riding / ridden",
        "adult child",
        fixed="Fahrrad=a_bike",
        places="park street forest",
        roles="show while sg",
    ),
    _verb(
        "Handstand",
        "macht machen gemacht haben",
        "doing / done",
        "child adult",
        fixed="einen=a Handstand=handstand",
        places="beach meadow gym park playground grass",
        roles="show sg",
        not_subject="old group",
    ),
    _verb(
        "Picknick",
        "macht machen gemacht haben",
        "having / had",
        "adult group",
        fixed="ein=a Picknick=picnic",
        places="park meadow beach garden outdoors forest",
        perfect=False,
        roles="while",
    ),
    _verb(
        "Pause",
        "macht machen gemacht haben",
        "taking / taken",
        "adult",
        fixed="eine=a Pause=break",
        places="bench park office shade",
        perfect=False,
        roles="calm",
    ),
    _verb(
        "Tor",
        "schießt schießen geschossen haben",
        "scoring / scored",
        "adult child",
        fixed="ein=a Tor=goal",
        perfect=True,
        roles="show sg",
        not_subject="old group",
    ),
    _verb(
        "Hausaufgaben",
        "macht machen gemacht haben",
        "doing / done",
        "child",
        slots=(Slot("acc", _t("chore2"), dets=("poss",)),),
        places="table kitchen library",
        perfect=False,
        roles="while",
    ),
    # --- transitive ------------------------------------------------------------------------------
    _verb(
        "werfen",
        "wirft werfen geworfen haben",
        "throwing / thrown",
        "adult child",
        slots=(Slot("acc", _t("throwable")),),
        places=_PLAY + " field",
        roles="show while",
        not_subject="old group",
    ),
    _verb(
        "fangen",
        "fängt fangen gefangen haben",
        "catching / caught",
        "adult child dog",
        slots=(Slot("acc", _t("catchable"), dets=("indef", "def")),),
        places="park beach meadow garden field",
        roles="show",
        not_subject="old group",
    ),
    _verb(
        "fangen_Fisch",
        "fängt fangen gefangen haben",
        "catching / caught",
        "adult child bear",
        slots=(Slot("acc", _t("fish"), dets=("indef", "num")),),
        places="waterside boat water",
        not_subject="group",
    ),
    _verb(
        "jagen",
        "jagt jagen gejagt haben",
        "chasing / chased",
        "dog cat",
        slots=(Slot("acc", _t("ball bird smallanimal cat"), dets=("indef", "def", "num")),),
        places="park garden meadow beach field grass",
    ),
    _verb(
        "tragen",
        "trägt tragen getragen haben",
        "wearing / worn",
        "person",
        slots=(Slot("acc", _t("clothing"), dets=("indef",), distributive=True),),
        perfect=False,
        roles="while",
    ),
    _verb(
        "tragen_carry",
        "trägt tragen getragen haben",
        "carrying / carried",
        "adult child",
        slots=(Slot("acc", _t("carryable instrument baby"), dets=("indef", "def", "poss"), distributive=True),),
        places="street park station beach",
        perfect=False,
        roles="while",
    ),
    _verb(
        "halten",
        "hält halten gehalten haben",
        "holding / held",
        "adult child",
        slots=(Slot("acc", _t("holdable"), distributive=True),),
        perfect=False,
        roles="while calm",
    ),
    _verb(
        "lesen",
        "liest lesen gelesen haben",
        "reading / read",
        "adult child",
        slots=(Slot("acc", _t("readable"), distributive=True),),
        places="park bench garden sofa library shade table outdoors livingroom",
        roles="while calm",
    ),
    _verb(
        "schreiben",
        "schreibt schreiben geschrieben haben",
        "writing / written",
        "adult child",
        slots=(Slot("acc", _t("writable"), dets=("indef",), distributive=True),),
        places="table kitchen library office",
        roles="while calm",
    ),
    _verb(
        "streichen",
        "streicht streichen gestrichen haben",
        "painting / painted",
        "adult",
        slots=(Slot("acc", _t("paintable"), dets=("def", "poss")),),
        places="garden",
        roles="while",
        not_subject="artiste",
    ),
    _verb(
        "malen_Bild",
        "malt malen gemalt haben",
        "painting / painted",
        "adult child",
        slots=(Slot("acc", _t("picture"), dets=("indef",)),),
        places="garden table outdoors park livingroom",
        roles="while calm",
    ),
    _verb(
        "zeichnen",
        "zeichnet zeichnen gezeichnet haben",
        "drawing / drawn",
        "adult child",
        slots=(Slot("acc", _t("drawable"), dets=("indef",), distributive=True),),
        places="table park outdoors",
        roles="while calm",
    ),
    _verb(
        "essen",
        "isst essen gegessen haben",
        "eating / eaten",
        "adult child",
        slots=(Slot("acc", _t("food"), dets=("indef", "num"), distributive=True),),
        places="kitchen restaurant park bench beach table outdoors garden",
        roles="while calm",
    ),
    _verb(
        "fressen",
        "frisst fressen gefressen haben",
        "eating / eaten",
        "grazer horse",
        slots=(Slot("acc", _t("fodder"), dets=("bare",)),),
        places="meadow field farm",
    ),
    _verb(
        "fressen_Obst",
        "frisst fressen gefressen haben",
        "eating / eaten",
        "Affe Elefant",
        slots=(Slot("acc", _t("monkeyfood horsefood"), dets=("indef", "num")),),
        places="zoo",
    ),
    _verb(
        "trinken",
        "trinkt trinken getrunken haben",
        "drinking / drunk",
        "adult child",
        slots=(Slot("acc", _t("drink"), dets=("bare",)),),
        places="kitchen restaurant table outdoors garden bench",
        roles="while calm",
    ),
    _verb(
        "trinken_Tier",
        "trinkt trinken getrunken haben",
        "drinking / drunk",
        "dog cat horse",
        slots=(Slot("acc", _t("animaldrink"), dets=("bare",)),),
        perfect=False,
    ),
    _verb(
        "kaufen",
        "kauft kaufen gekauft haben",
        "buying / bought",
        "adult",
        slots=(Slot("acc", _t("buyable"), dets=("indef", "num"), distributive=True),),
        places="market supermarket",
        roles="while",
    ),
    _verb(
        "verkaufen",
        "verkauft verkaufen verkauft haben",
        "selling / sold",
        "seller adult",
        slots=(Slot("acc", _t("sellable"), dets=("bare",)),),
        places="market street beach station",
        roles="while",
    ),
    _verb(
        "bauen",
        "baut bauen gebaut haben",
        "building / built",
        "adult child",
        slots=(Slot("acc", _t("buildable"), dets=("indef",)),),
        places="beach sand snow garden",
        roles="show while",
    ),
    _verb(
        "kochen_tr",
        "kocht kochen gekocht haben",
        "cooking / cooked",
        "adult",
        slots=(Slot("acc", _t("cookable"), dets=("indef", "bare")),),
        places="kitchen home outdoors",
        roles="while",
    ),
    _verb(
        "backen",
        "backt backen gebacken haben",
        "baking / baked",
        "adult child",
        slots=(Slot("acc", _t("bakeable"), dets=("indef",)),),
        places="kitchen home",
        roles="while",
    ),
    _verb(
        "schneiden",
        "schneidet schneiden geschnitten haben",
        "cutting / cut",
        "adult",
        slots=(Slot("acc", _t("cuttable"), dets=("indef", "def", "bare")),),
        places="kitchen table",
        roles="while",
    ),
    _verb(
        "waschen",
        "wäscht waschen gewaschen haben",
        "washing / washed",
        "adult child",
        slots=(Slot("acc", _t("washable dog"), dets=("def", "poss")),),
        places="garden street",
        roles="while",
    ),
    _verb(
        "putzen",
        "putzt putzen geputzt haben",
        "cleaning / cleaned",
        "adult",
        slots=(Slot("acc", _t("cleanable"), dets=("def",)),),
        roles="while",
    ),
    _verb(
        "streicheln",
        "streichelt streicheln gestreichelt haben",
        "petting / petted",
        "adult child",
        slots=(Slot("acc", _t("pet horse farmanimal"), dets=("indef", "def", "poss", "num", "defpl")),),
        places="park garden meadow farm zoo sofa",
        roles="while calm",
    ),
    _verb(
        "füttern",
        "füttert füttern gefüttert haben",
        "feeding / fed",
        "adult child",
        slots=(
            Slot(
                "acc",
                _t("pet horse farmanimal waterbird Taube Giraffe Elefant Affe baby"),
                dets=("indef", "def", "poss", "num"),
            ),
        ),
        places="park waterside farm zoo garden kitchen meadow",
        roles="while",
    ),
    _verb(
        "umarmen",
        "umarmt umarmen umarmt haben",
        "hugging / hugged",
        "person",
        slots=(Slot("acc", _t("kin huggable dog"), dets=("poss", "indef")),),
        roles="show",
        not_subject="baby",
    ),
    _verb(
        "besuchen",
        "besucht besuchen besucht haben",
        "visiting / visited",
        "adult child",
        slots=(Slot("acc", _t("grandparent friend"), dets=("poss",)),),
        perfect=True,
    ),
    _verb(
        "schieben",
        "schiebt schieben geschoben haben",
        "pushing / pushed",
        "adult child",
        slots=(Slot("acc", _t("pushable"), dets=("indef", "def", "poss")),),
        places="park street sidewalk supermarket market",
        roles="while",
    ),
    _verb(
        "ziehen",
        "zieht ziehen gezogen haben",
        "pulling / pulled",
        "adult child dog horse",
        slots=(Slot("acc", _t("pullable"), dets=("indef", "def", "poss")),),
        places="snow",
        roles="while",
    ),
    _verb(
        "fahren",
        "fährt fahren gefahren haben",
        "driving / driven",
        "adult",
        slots=(Slot("acc", _t("drivable"), dets=("indef", "def", "poss")),),
        places="street field farm",
        roles="while sg",
        not_subject="group",
    ),
    _verb(
        "fahren_Motorrad",
        "fährt fahren gefahren haben",
        "riding / rode",
        "adult",
        slots=(Slot("acc", _t("rideable"), dets=("indef", "def", "poss")),),
        places="street field",
        roles="while sg",
        not_subject="group",
    ),
    _verb(
        "reparieren",
        "repariert reparieren repariert haben",
        "fixing / fixed",
        "adult",
        slots=(Slot("acc", _t("fixable"), dets=("indef", "def", "poss")),),
        places="garden street",
        roles="while",
    ),
    _verb(
        "pflanzen",
        "pflanzt pflanzen gepflanzt haben",
        "planting / planted",
        "adult child",
        slots=(Slot("acc", _t("plantable"), dets=("indef", "num")),),
        places="garden park",
        roles="while",
    ),
    _verb(
        "pflücken",
        "pflückt pflücken gepflückt haben",
        "picking / picked",
        "adult child",
        slots=(Slot("acc", _t("flower Apfel Birne Erdbeere Tomate"), dets=("bare",)),),
        places="garden meadow",
        roles="while",
    ),
    _verb(
        "fotografieren",
        "fotografiert fotografieren fotografiert haben",
        "taking a picture of / taken a picture of",
        "adult child",
        slots=(Slot("acc", _t("animal building flower view"), dets=("indef", "def", "num")),),
        places="zoo park beach farm garden mountain bridge meadow",
        roles="while",
    ),
    _verb(
        "beobachten",
        "beobachtet beobachten beobachtet haben",
        "watching / watched",
        "adult child cat",
        slots=(Slot("acc", _t("bird zooanimal"), dets=("indef", "def", "num")),),
        places="park waterside zoo garden window",
        roles="while calm",
        perfect=False,
    ),
    _verb(
        "sammeln",
        "sammelt sammeln gesammelt haben",
        "collecting / collected",
        "adult child",
        slots=(Slot("acc", _t("collectable"), dets=("bare",)),),
        places="beach forest park meadow",
        roles="while",
    ),
    _verb(
        "graben",
        "gräbt graben gegraben haben",
        "digging / dug",
        "child adult dog",
        slots=(Slot("acc", _t("diggable"), dets=("indef",)),),
        places="sand beach garden",
        roles="while",
    ),
    _verb(
        "hören",
        "hört hören gehört haben",
        "listening to / listened to",
        "adult child",
        slots=(Slot("acc", _t("music"), dets=("bare",)),),
        places="livingroom kitchen park outdoors sofa",
        perfect=False,
        roles="while calm",
    ),
    _verb(
        "genießen",
        "genießt genießen genossen haben",
        "enjoying / enjoyed",
        "adult child",
        slots=(Slot("acc", _t("day sun view"), dets=("indef", "def")),),
        places="park beach garden meadow outdoors waterside mountain bridge",
        roles="while calm",
    ),
    _verb(
        "klettern",
        "klettert klettern geklettert sein",
        "climbing / climbed",
        "adult child cat",
        slots=(Slot("acc", _t("climbable"), "auf", "", ("indef",)),),
        places="park garden forest",
        roles="show",
        not_subject="old group",
    ),
    _verb(
        "klettern_Berg",
        "klettert klettern geklettert sein",
        "climbing / climbed",
        "adult",
        slots=(Slot("acc", _t("mountainslot"), "auf", "", ("indef",)),),
        roles="show",
    ),
    _verb(
        "spielen_Sport",
        "spielt spielen gespielt haben",
        "playing / played",
        "adult child",
        slots=(Slot("acc", _t("sport game"), dets=("bare",)),),
        roles="show while",
        places="park field beach street meadow playground gym livingroom table home library",
        not_subject="old",
    ),
    _verb(
        "spielen_Instrument",
        "spielt spielen gespielt haben",
        "playing / played",
        "adult child",
        slots=(Slot("acc", _t("instrument"), dets=("bare",)),),
        places="stage livingroom park street station outdoors",
        roles="show while sg",
    ),
    _verb(
        "spielen_mit",
        "spielt spielen gespielt haben",
        "playing / played",
        "child",
        slots=(Slot("dat", _t("pet toy ball"), "mit", "with", ("indef", "def", "poss", "defpl", "num")),),
        places=_PLAY,
        roles="while",
    ),
    _verb(
        "spielen_mit_Tier",
        "spielt spielen gespielt haben",
        "playing / played",
        "dog cat",
        slots=(Slot("dat", _t("dog cat ball"), "mit", "with", ("indef", "def", "defpl", "num")),),
        places=_PLAY,
    ),
    _verb(
        "reiten",
        "reitet reiten geritten sein",
        "riding / ridden",
        "adult child",
        slots=(Slot("dat", _t("horse"), "auf", "", ("indef", "def", "poss")),),
        places="beach meadow field forest farm",
        roles="show while sg",
    ),
    _verb(
        "sitzen_auf",
        "sitzt sitzen gesessen haben",
        "sitting / sat",
        "adult child",
        slots=(Slot("dat", _t("horse bike"), "auf", "on", ("indef", "def", "poss")),),
        places="meadow beach park field street",
        perfect=False,
        roles="needplace calm sg",
    ),
    _verb(
        "spazieren_mit",
        "geht gehen spazieren_gegangen sein",
        "walking / walked",
        "adult child",
        slots=(Slot("dat", _t("dog"), "mit", "", ("poss", "def")),),
        particle="spazieren",
        particle_apart=True,
        places="park forest beach street",
        roles="while",
    ),
    _verb(
        "helfen",
        "hilft helfen geholfen haben",
        "helping / helped",
        "adult child",
        slots=(Slot("dat", _t("kin parent"), dets=("poss",)), Slot("dat", _t("chore"), "bei", "with", ("def",))),
        roles="while",
    ),
    _verb(
        "zeigen",
        "zeigt zeigen gezeigt haben",
        "showing / shown",
        "adult child",
        slots=(Slot("dat", _t("kin"), dets=("poss",)), Slot("acc", _t("showable"), dets=("indef", "def"))),
        places="park livingroom table sofa",
        roles="while",
    ),
    _verb(
        "geben_Hund",
        "gibt geben gegeben haben",
        "giving / given",
        "adult child",
        slots=(Slot("dat", _t("dog"), dets=("poss", "def", "indef")), Slot("acc", _t("dogfood ball"), dets=("indef",))),
        places="garden park kitchen",
        roles="while",
    ),
    _verb(
        "geben_Pferd",
        "gibt geben gegeben haben",
        "giving / given",
        "adult child",
        slots=(
            Slot("dat", _t("horse farmanimal"), dets=("def", "indef")),
            Slot("acc", _t("horsefood"), dets=("indef",)),
        ),
        places="meadow field farm",
        roles="while",
    ),
    _verb(
        "geben_Kind",
        "gibt geben gegeben haben",
        "giving / given",
        "adult",
        slots=(Slot("dat", _t("kin"), dets=("poss",)), Slot("acc", _t("giveable sweet"), dets=("indef",))),
        places="kitchen park garden livingroom",
        roles="while",
    ),
    _verb(
        "vorlesen",
        "liest lesen vorgelesen haben",
        "reading / read",
        "adult",
        slots=(
            Slot("dat", _t("child"), dets=("poss",), en_to=True),
            Slot("acc", _t("story Buch Comic Zeitung Brief"), dets=("indef",)),
        ),
        particle="vor",
        places="sofa livingroom shade bed",
        roles="while calm",
    ),
    _verb(
        "zuschauen_dat",
        "schaut schauen zugeschaut haben",
        "watching / watched",
        "adult child",
        slots=(Slot("dat", _t("person animal"), dets=("def", "num", "poss", "defpl")),),
        particle="zu",
        places="park beach street zoo meadow",
        perfect=False,
        roles="calm",
    ),
    _verb(
        "anschauen",
        "schaut schauen angeschaut haben",
        "looking at / looked at",
        "adult child",
        slots=(Slot("acc", _t("picture photo readable"), dets=("indef", "def")),),
        particle="an",
        places="livingroom sofa table library",
        perfect=False,
        roles="while calm",
    ),
    _verb(
        "einsteigen",
        "steigt steigen eingestiegen sein",
        "getting on / gotten on",
        "adult child",
        slots=(Slot("acc", _t("boardable"), "in", "", ("def",)),),
        particle="ein",
        perfect=False,
        roles="while",
        not_subject="group",
    ),
    _verb(
        "aussteigen",
        "steigt steigen ausgestiegen sein",
        "getting off / gotten off",
        "adult child",
        slots=(Slot("dat", _t("boardable"), "aus", "", ("def",)),),
        particle="aus",
        perfect=False,
        roles="while",
        not_subject="group",
    ),
    _verb(
        "aufheben",
        "hebt heben aufgehoben haben",
        "picking up / picked up",
        "adult child",
        particle="auf",
        slots=(Slot("acc", _t("pickable toy"), dets=("indef", "def", "poss"), distributive=True),),
        places="beach park street garden",
        roles="while",
    ),
    _verb(
        "anziehen",
        "zieht ziehen angezogen haben",
        "putting on / put on",
        "adult child",
        particle="an",
        slots=(Slot("acc", _t("clothing"), dets=("poss", "def"), distributive=True, excludes=_t("headwear")),),
        roles="while",
    ),
    _verb(
        "aufsetzen",
        "setzt setzen aufgesetzt haben",
        "putting on / put on",
        "adult child",
        particle="auf",
        slots=(Slot("acc", _t("headwear"), dets=("poss", "def"), distributive=True),),
        roles="while",
    ),
    _verb(
        "abnehmen",
        "nimmt nehmen abgenommen haben",
        "taking off / taken off",
        "adult child",
        particle="ab",
        slots=(Slot("acc", _t("headwear"), dets=("poss", "def"), distributive=True),),
        roles="while",
    ),
    _verb(
        "zubereiten",
        "bereitet bereiten zubereitet haben",
        "preparing / prepared",
        "adult",
        particle="zu",
        slots=(Slot("acc", _t("preparable"), dets=("indef", "def")),),
        places="kitchen home restaurant table",
        roles="while",
    ),
    _verb(
        "ausziehen",
        "zieht ziehen ausgezogen haben",
        "taking off / taken off",
        "adult child",
        particle="aus",
        slots=(Slot("acc", _t("clothing"), dets=("poss", "def"), distributive=True, excludes=_t("headwear")),),
        roles="while",
    ),
    _verb(
        "aufmachen",
        "macht machen aufgemacht haben",
        "opening / opened",
        "adult child",
        particle="auf",
        slots=(Slot("acc", _t("openable"), dets=("indef", "def")),),
        roles="while show",
    ),
    _verb(
        "aufräumen",
        "räumt räumen aufgeräumt haben",
        "tidying up / tidied up",
        "adult child",
        particle="auf",
        slots=(Slot("acc", _t("tidyable"), dets=("def", "poss")),),
        roles="while",
    ),
    _verb(
        "aufhängen",
        "hängt hängen aufgehängt haben",
        "hanging up / hung up",
        "adult",
        particle="auf",
        slots=(Slot("acc", _t("hangable"), dets=("indef", "def")),),
        places="garden livingroom",
        roles="while",
    ),
    _verb(
        "abholen",
        "holt holen abgeholt haben",
        "picking up / picked up",
        "adult",
        particle="ab",
        slots=(Slot("acc", _t("child"), dets=("poss",)),),
        places="school station busstop",
        roles="while",
    ),
    # --- added for breadth ------------------------------------------------------------------
    _verb(
        "schaukeln",
        "schaukelt schaukeln geschaukelt haben",
        "swinging / swung",
        "child",
        places="playground garden park swing",
        roles="show while",
    ),
    _verb(
        "rutschen",
        "rutscht rutschen gerutscht sein",
        "sliding / slid",
        "child",
        places="playground snow",
        roles="show while",
    ),
    _verb(
        "Seil",
        "springt springen Seil_gesprungen sein",
        "jumping / jumped",
        "child",
        fixed="Seil=rope",
        places="playground street park garden",
        perfect=False,
        roles="show while",
    ),
    _verb(
        "joggen",
        "joggt joggen gejoggt sein",
        "jogging / jogged",
        "adult sporty",
        places="park beach forest street shore",
        dirs="through",
        roles="while",
        not_subject="old group",
    ),
    _verb(
        "wandern",
        "wandert wandern gewandert sein",
        "hiking / hiked",
        "adult child",
        places="mountain forest hill desert",
        dirs="through",
        roles="while",
    ),
    _verb(
        "paddeln",
        "paddelt paddeln gepaddelt sein",
        "paddling / paddled",
        "adult child",
        places="lakesurface boat",
        roles="show while",
        not_subject="old",
    ),
    _verb(
        "segeln",
        "segelt segeln gesegelt sein",
        "sailing / sailed",
        "adult",
        places="lakesurface harbor",
        roles="while",
        not_subject="group",
    ),
    _verb(
        "tauchen",
        "taucht tauchen getaucht sein",
        "diving / dived",
        "adult child",
        places="water",
        roles="show",
        not_subject="old group",
        perfect=False,
    ),
    _verb(
        "rudern",
        "rudert rudern gerudert sein",
        "rowing / rowed",
        "adult",
        places="lakesurface",
        roles="while",
        not_subject="group",
    ),
    _verb(
        "lernen",
        "lernt lernen gelernt haben",
        "studying / studied",
        "adult child",
        places="library table kitchen school",
        perfect=False,
        roles="while calm",
        not_subject="old",
    ),
    _verb(
        "fernsehen",
        "sieht sehen ferngesehen haben",
        "watching TV / watched TV",
        "person",
        particle="fern",
        places="livingroom sofa home",
        perfect=False,
        roles="while calm",
        not_subject="baby",
    ),
    _verb(
        "sprechen_mit",
        "spricht sprechen gesprochen haben",
        "talking / talked",
        "adult child",
        slots=(Slot("dat", _t("person"), "mit", "to", ("indef", "def", "poss", "defpl", "num")),),
        places="street park station busstop market kitchen front",
        perfect=False,
        roles="calm",
    ),
    _verb(
        "tanzen_mit",
        "tanzt tanzen getanzt haben",
        "dancing / danced",
        "adult child",
        slots=(Slot("dat", _t("kin parent"), "mit", "with", ("poss",)),),
        places="stage livingroom park beach outdoors",
        roles="show while",
    ),
    _verb(
        "singen_Lied",
        "singt singen gesungen haben",
        "singing / sung",
        "adult child",
        slots=(Slot("acc", _t("song"), dets=("indef",)),),
        places="stage kitchen park outdoors church",
        roles="show while",
    ),
    _verb(
        "erzählen",
        "erzählt erzählen erzählt haben",
        "telling / told",
        "adult",
        slots=(Slot("dat", _t("child"), dets=("poss",)), Slot("acc", _t("story"), dets=("indef",))),
        places="sofa livingroom bed shade",
        roles="while calm",
    ),
    _verb(
        "grillen",
        "grillt grillen gegrillt haben",
        "grilling / grilled",
        "adult",
        slots=(Slot("acc", _t("grillable"), dets=("bare",)),),
        places="garden beach park outdoors",
        roles="while",
    ),
    _verb(
        "gießen",
        "gießt gießen gegossen haben",
        "watering / watered",
        "adult child",
        slots=(Slot("acc", _t("flower"), dets=("def", "poss"), distributive=True),),
        places="garden",
        roles="while",
    ),
    _verb(
        "mähen",
        "mäht mähen gemäht haben",
        "mowing / mowed",
        "adult",
        slots=(Slot("acc", _t("mowable"), dets=("def",)),),
        roles="while",
    ),
    _verb(
        "fegen",
        "fegt fegen gefegt haben",
        "sweeping / swept",
        "adult",
        slots=(Slot("acc", _t("sweepable"), dets=("def",)),),
        places="kitchen bakery garage",
        roles="while",
    ),
    _verb(
        "bürsten",
        "bürstet bürsten gebürstet haben",
        "brushing / brushed",
        "adult child",
        slots=(Slot("acc", _t("horse dog"), dets=("indef", "def", "poss")),),
        places="farm meadow garden",
        roles="while",
    ),
    _verb(
        "arbeiten_an",
        "arbeitet arbeiten gearbeitet haben",
        "working / worked",
        "adult",
        slots=(Slot("dat", _t("laptop"), "an", "on", ("indef", "poss")),),
        places="office library table kitchen restaurant",
        roles="while calm",
    ),
    _verb(
        "Skateboard",
        "fährt fahren Skateboard_gefahren sein",
        "skateboarding / skateboarded",
        "adult child",
        fixed="Skateboard=",
        places="street park sidewalk",
        perfect=False,
        roles="show while",
        not_subject="old group",
    ),
    _verb(
        "Roller",
        "fährt fahren Roller_gefahren sein",
        "riding / ridden",
        "child",
        fixed="Roller=a_scooter",
        places="street park sidewalk",
        perfect=False,
        roles="show while sg",
    ),
    _verb(
        "füllen",
        "füllt füllen gefüllt haben",
        "filling / filled",
        "adult child",
        slots=(Slot("acc", _t("vessel"), dets=("indef", "poss")),),
        places="beach kitchen fountain",
        roles="while",
    ),
    _verb(
        "verteilen",
        "verteilt verteilen verteilt haben",
        "handing out / handed out",
        "adult",
        slots=(Slot("acc", _t("flyerable"), dets=("bare",)),),
        places="street market station front",
        roles="while",
    ),
)

VERBS_BY_KEY: dict[str, Verb] = {verb.key: verb for verb in VERBS}

# A noun used for mountains as climbing objects ("klettert auf einen Berg" -> "is climbing a mountain").
NOUNS["Berg"] = Noun("Berg", "m", "Berge", "mountain", "mountains", _t("thing mountainslot"))


# ---------------------------------------------------------------------------------------------------
# Modal verbs (the infinitive goes to the end: "will auf einen Baum klettern" -> "wants to climb a tree")
# ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Modal:
    """A modal verb: German finite forms and the English words for singular/plural subjects.

    ``en_neg``: the negated English, each word tagged ``m`` (translates the modal), ``n`` (translates
    *nicht*) or ``b`` (both): *will nicht* → ``does:m not:n want:m to:m``, *kann nicht* → ``cannot:b``.
    """

    key: str
    de3sg: str
    de3pl: str
    en_sg: str
    en_pl: str
    en_neg_sg: str = ""
    en_neg_pl: str = ""


MODALS: dict[str, Modal] = {
    "wollen": Modal(
        "wollen", "will", "wollen", "wants to", "want to", "does:m not:n want:m to:m", "do:m not:n want:m to:m"
    ),
    "möchten": Modal("möchten", "möchte", "möchten", "would like to", "would like to"),
    "können": Modal("können", "kann", "können", "can", "can", "cannot:b", "cannot:b"),
    "müssen": Modal("müssen", "muss", "müssen", "has to", "have to"),
}

#: Main clauses that take a *dass* clause: blocks of (German singular, plural, English singular, plural).
#: *freut sich* is one block (*is happy*); *ist stolz* two (*is* + *proud*).
THAT_FRAMES: dict[str, tuple[tuple[str, str, str, str], ...]] = {
    "sehen": (("sieht", "sehen", "sees", "see"),),
    "freuen": (("freut sich", "freuen sich", "is happy", "are happy"),),
    "stolz": (("ist", "sind", "is", "are"), ("stolz", "stolz", "proud", "proud")),
}


@dataclass(frozen=True)
class Reason:
    """A *weil* clause that explains a main clause: *weil es kalt ist* → *because it is cold*.

    ``de``/``en``: tokens in each language's order, ``word:link`` (tokens sharing a link are aligned);
    ``{pron}``, ``{be}`` and ``{have}`` stand for the main subject's pronoun and verb forms (*er ... ist*).
    It explains main clauses with one of ``verbs`` (keys or bases) whose objects all carry one of
    ``objects`` (tags or nouns; empty: any) and whose place, if ``places`` is given, carries one of them.
    """

    key: str
    de: str
    en: str
    verbs: frozenset[str]
    objects: frozenset[str] = frozenset()
    places: frozenset[str] = frozenset()
    person: bool = False  # about the subject itself (tired, hungry): people only
    adjective: str = ""  # the adjective that says the same of the subject (*müde*), never used with it


REASONS: tuple[Reason, ...] = (
    Reason(
        "cold",
        "weil:0 es:1 kalt:2 ist:3",
        "because:0 it:1 is:3 cold:2",
        _t("tragen anziehen aufsetzen trinken"),
        _t("Jacke Mantel Schal Pullover Mütze Tee Kakao"),
    ),
    Reason(
        "rain",
        "weil:0 es:1 regnet:2",
        "because:0 it:1 is:2 raining:2",
        _t("halten tragen_carry tragen anziehen"),
        _t("Regenschirm Jacke Mantel"),
    ),
    Reason("hot", "weil:0 es:1 heiß:2 ist:3", "because:0 it:1 is:3 hot:2", _t("schwimmen tauchen springen")),
    Reason(
        "hot_things",
        "weil:0 es:1 heiß:2 ist:3",
        "because:0 it:1 is:3 hot:2",
        _t("essen trinken ausziehen abnehmen"),
        _t("Eis Wasser Limonade Saft Jacke Pullover Mantel Hut Mütze"),
    ),
    Reason("hot_shade", "weil:0 es:1 heiß:2 ist:3", "because:0 it:1 is:3 hot:2", _t("sitzen"), places=_t("shade")),
    Reason(
        "sun",
        "weil:0 die:1 Sonne:2 scheint:3",
        "because:0 the:1 sun:2 is:3 shining:3",
        _t("Picknick spielen spielen_Sport lesen sitzen frühstücken"),
        places=_t("park garden beach meadow outdoors playground"),
    ),
    Reason(
        "tired",
        "weil:0 {pron}:1 müde:2 {be}:3",
        "because:0 {pron}:1 {be}:3 tired:2",
        _t("schlafen sitzen Pause"),
        person=True,
        adjective="müde",
    ),
    Reason(
        "hungry",
        "weil:0 {pron}:1 Hunger:2 {have}:2",
        "because:0 {pron}:1 {be}:2 hungry:2",
        _t("essen kaufen kochen kochen_tr backen zubereiten grillen"),
        _t("food bakeable grillable preparable"),
        person=True,
        adjective="hungrig",
    ),
    Reason(
        "thirsty",
        "weil:0 {pron}:1 Durst:2 {have}:2",
        "because:0 {pron}:1 {be}:2 thirsty:2",
        _t("trinken"),
        _t("Wasser Saft Limonade Milch"),
        person=True,
    ),
)

NUMBERS: tuple[tuple[str, str], ...] = (("zwei", "two"), ("drei", "three"), ("vier", "four"))
