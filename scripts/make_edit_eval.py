#!/usr/bin/env python3
"""Generate the knowledge-edit evaluation set of `larql edit-eval` (docs/cli.md "edit-eval"):
data/edit_eval/full.jsonl (1,000 made-up facts) and data/edit_eval/subset100.jsonl (its first 100
facts, for `make test`). Standard library only; deterministic for a given seed and model.

What it writes, one JSON object a line (data/edit_eval/README.md has the schema):
- "meta": the seed, the model the set was filtered on (index.json's model and fingerprint).
- "fact": a made-up fact — an invented subject (so the base model cannot know it), a relation
  (the string INSERT takes: the canonical prompt is "The {relation} of {entity} is", as LQL
  builds it), a target whose first token (" " + target, checked with `larql tokenize`) is a
  single token, 3 paraphrase prompts, and 5 neighbourhood prompts: real subjects of the same
  relation, each with the answer the base model gives top-1 (checked with the model).
- "real": real-fact prompts the base model answers top-1 (other relations and templates).
- "fluency": prompts whose greedy continuations measure fluency.
- "heldout": a text (written for this set) for the perplexity change.

Model checks go through the larql binary: `larql tokenize` for every target and answer, and one
`larql lql VINDEX --json` process running `INFER "..." TOP 1` for every candidate prompt. A
candidate fact is dropped when the base model already answers its target (top-1) on its
canonical prompt or on a paraphrase; a neighbourhood or real-fact candidate is kept only when the
model's top-1 is the first token of its answer (one of the answers listed for it).

    .venv/bin/python scripts/make_edit_eval.py --larql build/larql [--vindex X.vindex] [--seed 1]

Without --vindex the default model is extracted to a temporary vindex first (~1.5 minutes).
"""
from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

# ---------------------------------------------------------------------------------------------
# Relations. `relation` is what INSERT takes (the canonical prompt is "The {relation} of {s} is");
# `kind` says what the invented subjects are; `targets` the answers made-up facts get (kept when
# " " + target is one token); `paraphrases` are templates for the made-up subject; `neighbours`
# are templates for real subjects, `real` the real (subject, answers) pairs they are tried with.
# ---------------------------------------------------------------------------------------------

COUNTRY_CAPITALS = [
    ("France", "Paris"), ("Germany", "Berlin"), ("Italy", "Rome"), ("Spain", "Madrid"), ("Japan", "Tokyo"),
    ("China", "Beijing"), ("Russia", "Moscow"), ("Egypt", "Cairo"), ("Greece", "Athens"), ("Portugal", "Lisbon"),
    ("Poland", "Warsaw"), ("Austria", "Vienna"), ("Norway", "Oslo"), ("Sweden", "Stockholm"), ("Finland", "Helsinki"),
    ("Ireland", "Dublin"), ("Kenya", "Nairobi"), ("Peru", "Lima"), ("Canada", "Ottawa"), ("Thailand", "Bangkok"),
    ("Hungary", "Budapest"), ("England", "London"), ("South Korea", "Seoul"), ("Turkey", "Ankara"), ("Iran", "Tehran"),
    ("Iraq", "Baghdad"), ("Cuba", "Havana"), ("Chile", "Santiago"), ("Venezuela", "Caracas"), ("Australia", "Canberra"),
    ("Denmark", "Copenhagen"), ("Belgium", "Brussels"), ("the Netherlands", "Amsterdam"), ("Switzerland", "Bern"),
    ("the Czech Republic", "Prague"), ("Romania", "Bucharest"), ("Bulgaria", "Sofia"), ("Serbia", "Belgrade"),
    ("Vietnam", "Hanoi"), ("Indonesia", "Jakarta"), ("the Philippines", "Manila"), ("Saudi Arabia", "Riyadh"),
    ("Syria", "Damascus"), ("Lebanon", "Beirut"), ("Afghanistan", "Kabul"), ("Pakistan", "Islamabad"),
    ("Bangladesh", "Dhaka"), ("Nepal", "Kathmandu"), ("Scotland", "Edinburgh"), ("Wales", "Cardiff"),
    ("Iceland", "Reykjavik"), ("Estonia", "Tallinn"), ("Latvia", "Riga"), ("Lithuania", "Vilnius"),
    ("Croatia", "Zagreb"), ("Jamaica", "Kingston"), ("Ghana", "Accra"), ("Senegal", "Dakar"), ("Uganda", "Kampala"),
    ("Zimbabwe", "Harare"), ("North Korea", "Pyongyang"), ("Taiwan", "Taipei"), ("Qatar", "Doha"),
    ("Ecuador", "Quito"), ("Uruguay", "Montevideo"), ("Morocco", "Rabat"), ("Nigeria", "Abuja"),
    ("Argentina", "Buenos Aires"), ("India", "New Delhi"), ("Mexico", "Mexico City"), ("Ukraine", "Kyiv"),
]

LANGUAGES = [
    ("France", "French"), ("Germany", "German"), ("Italy", "Italian"), ("Spain", "Spanish"), ("Japan", "Japanese"),
    ("Russia", "Russian"), ("Portugal", "Portuguese"), ("Brazil", "Portuguese"), ("Mexico", "Spanish"),
    ("Greece", "Greek"), ("Poland", "Polish"), ("the Netherlands", "Dutch"), ("Sweden", "Swedish"),
    ("Norway", "Norwegian"), ("Turkey", "Turkish"), ("Hungary", "Hungarian"), ("Argentina", "Spanish"),
    ("Egypt", "Arabic"), ("Iran", "Persian|Farsi"), ("Thailand", "Thai"), ("Vietnam", "Vietnamese"),
    ("Denmark", "Danish"), ("Finland", "Finnish"), ("China", "Chinese|Mandarin"), ("South Korea", "Korean"),
    ("Israel", "Hebrew"), ("Saudi Arabia", "Arabic"), ("Colombia", "Spanish"), ("Peru", "Spanish"),
    ("Chile", "Spanish"), ("Cuba", "Spanish"), ("Austria", "German"), ("the Czech Republic", "Czech"),
    ("Romania", "Romanian"), ("Ukraine", "Ukrainian"), ("Indonesia", "Indonesian"), ("Bulgaria", "Bulgarian"),
    ("Serbia", "Serbian"), ("Croatia", "Croatian"), ("England", "English"), ("Australia", "English"),
    ("the United States", "English"), ("Iceland", "Icelandic"), ("Pakistan", "Urdu"), ("Bangladesh", "Bengali"),
    ("Kenya", "Swahili|English"), ("Ethiopia", "Amharic"), ("Morocco", "Arabic"), ("Iraq", "Arabic"),
    ("Syria", "Arabic"), ("Venezuela", "Spanish"), ("Ecuador", "Spanish"), ("Slovakia", "Slovak"),
]

CURRENCIES = [
    ("Japan", "yen"), ("the United Kingdom", "pound"), ("the United States", "dollar"), ("India", "rupee"),
    ("China", "yuan|renminbi"), ("Russia", "ruble|rouble"), ("Mexico", "peso"), ("Brazil", "real"),
    ("Switzerland", "franc"), ("Sweden", "krona"), ("Norway", "krone"), ("Denmark", "krone"), ("Poland", "zloty"),
    ("Turkey", "lira"), ("South Korea", "won"), ("Thailand", "baht"), ("South Africa", "rand"), ("Israel", "shekel"),
    ("Germany", "euro"), ("France", "euro"), ("Italy", "euro"), ("Spain", "euro"), ("Hungary", "forint"),
    ("Vietnam", "dong"), ("Canada", "dollar"), ("Australia", "dollar"), ("Argentina", "peso"), ("Chile", "peso"),
    ("Colombia", "peso"), ("Egypt", "pound"), ("Pakistan", "rupee"), ("Indonesia", "rupiah"),
    ("the Philippines", "peso"), ("Saudi Arabia", "riyal"), ("Iran", "rial"), ("Nigeria", "naira"),
    ("Kenya", "shilling"), ("Ukraine", "hryvnia"), ("the Czech Republic", "koruna|crown"), ("Malaysia", "ringgit"),
    ("New Zealand", "dollar"), ("Greece", "euro"), ("Portugal", "euro"), ("Ireland", "euro"), ("Austria", "euro"),
    ("the Netherlands", "euro"), ("Iraq", "dinar"), ("Jordan", "dinar"), ("Kuwait", "dinar"), ("Morocco", "dirham"),
    ("the United Arab Emirates", "dirham"), ("Cuba", "peso"), ("Bangladesh", "taka"), ("Sri Lanka", "rupee"),
]

CONTINENTS = [
    ("France", "Europe"), ("Germany", "Europe"), ("Poland", "Europe"), ("Sweden", "Europe"), ("Italy", "Europe"),
    ("Spain", "Europe"), ("Norway", "Europe"), ("Hungary", "Europe"), ("Austria", "Europe"), ("Greece", "Europe"),
    ("Japan", "Asia"), ("China", "Asia"), ("India", "Asia"), ("Thailand", "Asia"), ("Vietnam", "Asia"),
    ("South Korea", "Asia"), ("Indonesia", "Asia"), ("Pakistan", "Asia"), ("Nepal", "Asia"), ("Mongolia", "Asia"),
    ("Kenya", "Africa"), ("Nigeria", "Africa"), ("Egypt", "Africa"), ("Ghana", "Africa"), ("Morocco", "Africa"),
    ("Ethiopia", "Africa"), ("Senegal", "Africa"), ("Uganda", "Africa"), ("Tanzania", "Africa"),
    ("Zimbabwe", "Africa"), ("Algeria", "Africa"), ("Cameroon", "Africa"), ("Brazil", "South America"),
    ("Argentina", "South America"), ("Peru", "South America"), ("Chile", "South America"),
    ("Colombia", "South America"), ("Bolivia", "South America"), ("Canada", "North America"),
    ("Mexico", "North America"), ("the United States", "North America"), ("Australia", "Australia|Oceania"),
    ("New Zealand", "Oceania|Australia"), ("Portugal", "Europe"), ("Finland", "Europe"), ("Laos", "Asia"),
]

CITIES = [
    ("Paris", "France"), ("Berlin", "Germany"), ("Rome", "Italy"), ("Madrid", "Spain"), ("Tokyo", "Japan"),
    ("Toronto", "Canada"), ("Sydney", "Australia"), ("Mumbai", "India"), ("Osaka", "Japan"), ("Munich", "Germany"),
    ("Milan", "Italy"), ("Barcelona", "Spain"), ("Lyon", "France"), ("Shanghai", "China"), ("Istanbul", "Turkey"),
    ("Cairo", "Egypt"), ("Moscow", "Russia"), ("Kyoto", "Japan"), ("Hamburg", "Germany"), ("Naples", "Italy"),
    ("Vancouver", "Canada"), ("Marseille", "France"), ("Seville", "Spain"), ("Valencia", "Spain"),
    ("Florence", "Italy"), ("Venice", "Italy"), ("Frankfurt", "Germany"), ("Cologne", "Germany"),
    ("Montreal", "Canada"), ("Melbourne", "Australia"), ("Delhi", "India"), ("Kolkata", "India"),
    ("Beijing", "China"), ("Rio de Janeiro", "Brazil"), ("Buenos Aires", "Argentina"), ("Lima", "Peru"),
    ("Nairobi", "Kenya"), ("Lagos", "Nigeria"), ("Casablanca", "Morocco"), ("Dublin", "Ireland"),
    ("Lisbon", "Portugal"), ("Porto", "Portugal"), ("Athens", "Greece"), ("Warsaw", "Poland"), ("Krakow", "Poland"),
    ("Prague", "Czech"), ("Vienna", "Austria"), ("Zurich", "Switzerland"),
    ("Geneva", "Switzerland"), ("Stockholm", "Sweden"), ("Oslo", "Norway"), ("Copenhagen", "Denmark"),
    ("Helsinki", "Finland"), ("Budapest", "Hungary"), ("Bangkok", "Thailand"), ("Hanoi", "Vietnam"),
    ("Manila", "Philippines"), ("Jakarta", "Indonesia"), ("Tehran", "Iran"), ("Baghdad", "Iraq"),
    ("Karachi", "Pakistan"), ("Dhaka", "Bangladesh"), ("Havana", "Cuba"), ("Edinburgh", "Scotland"),
    ("Manchester", "England"), ("Glasgow", "Scotland"), ("Bordeaux", "France"), ("Nagoya", "Japan"),
]

RELIGIONS = [
    ("Pakistan", "Islam"), ("Iran", "Islam"), ("Saudi Arabia", "Islam"), ("Afghanistan", "Islam"), ("Iraq", "Islam"),
    ("Indonesia", "Islam"), ("Egypt", "Islam"), ("Turkey", "Islam"), ("Morocco", "Islam"), ("Bangladesh", "Islam"),
    ("Algeria", "Islam"), ("Syria", "Islam"), ("Thailand", "Buddhism"), ("Cambodia", "Buddhism"),
    ("Myanmar", "Buddhism"), ("Sri Lanka", "Buddhism"), ("Tibet", "Buddhism"), ("Bhutan", "Buddhism"),
    ("Laos", "Buddhism"), ("Mongolia", "Buddhism"), ("India", "Hinduism"), ("Nepal", "Hinduism"),
    ("Israel", "Judaism"), ("Italy", "Christianity|Catholicism|Catholic"), ("Spain", "Christianity|Catholicism|Catholic"),
    ("Poland", "Christianity|Catholicism|Catholic"), ("Mexico", "Christianity|Catholicism|Catholic"),
    ("Brazil", "Christianity|Catholicism|Catholic"), ("the Philippines", "Christianity|Catholicism|Catholic"),
    ("Ireland", "Christianity|Catholicism|Catholic"), ("Greece", "Christianity|Orthodox"),
    ("Russia", "Christianity|Orthodox"), ("Japan", "Shinto|Buddhism"), ("the Vatican", "Christianity|Catholicism|Catholic"),
    ("Malaysia", "Islam"), ("Jordan", "Islam"), ("Libya", "Islam"), ("Somalia", "Islam"), ("Yemen", "Islam"),
]

PEOPLE_OCCUPATIONS = [
    ("William Shakespeare", "playwright|writer|poet"), ("Shakespeare", "playwright|writer|poet"),
    ("Albert Einstein", "physicist|scientist"), ("Pablo Picasso", "painter|artist"),
    ("Vincent van Gogh", "painter|artist"), ("Florence Nightingale", "nurse"), ("Muhammad Ali", "boxer"),
    ("Sigmund Freud", "psychologist|psychoanalyst|psychiatrist|neurologist"), ("Mozart", "composer"),
    ("Ludwig van Beethoven", "composer"), ("Beethoven", "composer"), ("Charles Darwin", "naturalist|scientist|biologist"),
    ("Isaac Newton", "physicist|mathematician|scientist"), ("Marie Curie", "physicist|chemist|scientist"),
    ("Amelia Earhart", "pilot|aviator"), ("Neil Armstrong", "astronaut"), ("Yuri Gagarin", "astronaut|cosmonaut"),
    ("Leonardo da Vinci", "painter|artist|inventor"), ("Michelangelo", "sculptor|painter|artist"),
    ("Charles Dickens", "writer|novelist|author"), ("Jane Austen", "writer|novelist|author"),
    ("Ernest Hemingway", "writer|novelist|author"), ("Mark Twain", "writer|author|humorist"),
    ("Agatha Christie", "writer|novelist|author"), ("Thomas Edison", "inventor"),
    ("Nikola Tesla", "inventor|engineer|physicist"), ("Galileo Galilei", "astronomer|physicist|scientist"),
    ("Gordon Ramsay", "chef"), ("Julia Child", "chef|cook"), ("Frank Lloyd Wright", "architect"),
    ("Elvis Presley", "singer|musician"), ("Frank Sinatra", "singer"), ("Michael Jackson", "singer"),
    ("Charlie Chaplin", "actor|comedian"), ("Marilyn Monroe", "actress|actor"), ("Tom Hanks", "actor"),
    ("Meryl Streep", "actress|actor"), ("Steven Spielberg", "director|filmmaker"),
    ("Alfred Hitchcock", "director|filmmaker"), ("Stephen Hawking", "physicist|scientist|cosmologist"),
    ("Carl Sagan", "astronomer|scientist"), ("Sherlock Holmes", "detective"), ("Socrates", "philosopher"),
    ("Plato", "philosopher"), ("Aristotle", "philosopher"), ("Confucius", "philosopher"),
    ("Friedrich Nietzsche", "philosopher"), ("Karl Marx", "philosopher|economist"), ("Adam Smith", "economist"),
    ("Hippocrates", "physician|doctor"), ("Louis Pasteur", "chemist|scientist|microbiologist"),
    ("Rembrandt", "painter|artist"), ("Claude Monet", "painter|artist"), ("Salvador Dali", "painter|artist"),
    ("Andy Warhol", "artist|painter"), ("Bob Dylan", "singer|musician|songwriter"), ("Usain Bolt", "sprinter|athlete|runner"),
    ("Michael Phelps", "swimmer"), ("Edgar Allan Poe", "writer|poet|author"), ("Homer", "poet"),
    ("Emily Dickinson", "poet"), ("Robert Frost", "poet"), ("Walt Whitman", "poet"),
    ("Mother Teresa", "nun|missionary"), ("Johann Sebastian Bach", "composer"), ("Pyotr Tchaikovsky", "composer"),
    ("Ansel Adams", "photographer"), ("Jacques Cousteau", "explorer|oceanographer"), ("Christopher Columbus", "explorer|navigator"),
]

MUSICIAN_INSTRUMENTS = [
    ("Jimi Hendrix", "guitar"), ("Louis Armstrong", "trumpet"), ("Eric Clapton", "guitar"), ("Yo-Yo Ma", "cello"),
    ("Miles Davis", "trumpet"), ("Ringo Starr", "drums"), ("Itzhak Perlman", "violin"), ("Lang Lang", "piano"),
    ("Charlie Parker", "saxophone"), ("John Coltrane", "saxophone"), ("Dizzy Gillespie", "trumpet"),
    ("B.B. King", "guitar"), ("Keith Moon", "drums"), ("John Bonham", "drums"), ("Neil Peart", "drums"),
    ("Buddy Rich", "drums"), ("Elton John", "piano"), ("Frederic Chopin", "piano"), ("Franz Liszt", "piano"),
    ("Niccolo Paganini", "violin"), ("Jascha Heifetz", "violin"), ("Pablo Casals", "cello"),
    ("Jacqueline du Pre", "cello"), ("Ravi Shankar", "sitar"), ("Stevie Ray Vaughan", "guitar"), ("Slash", "guitar"),
    ("Eddie Van Halen", "guitar"), ("Carlos Santana", "guitar"), ("Jimmy Page", "guitar"), ("Kenny G", "saxophone"),
    ("Benny Goodman", "clarinet"), ("Earl Scruggs", "banjo"), ("James Galway", "flute"), ("Glenn Gould", "piano"),
    ("Vladimir Horowitz", "piano"), ("Arthur Rubinstein", "piano"), ("Joshua Bell", "violin"),
    ("Vanessa-Mae", "violin"), ("Thelonious Monk", "piano"), ("Herbie Hancock", "piano"), ("Ray Charles", "piano"),
    ("Jerry Lee Lewis", "piano"), ("Jaco Pastorius", "bass"), ("Larry Adler", "harmonica"),
    ("Wynton Marsalis", "trumpet"), ("Chet Baker", "trumpet"), ("Sonny Rollins", "saxophone"), ("Stan Getz", "saxophone"),
    ("Bela Fleck", "banjo"), ("Andres Segovia", "guitar"), ("Django Reinhardt", "guitar"), ("Harpo Marx", "harp"),
    ("Chuck Berry", "guitar"), ("Stevie Wonder", "piano|harmonica"), ("Billy Joel", "piano"), ("Jean-Pierre Rampal", "flute"),
]

ATHLETE_SPORTS = [
    ("Serena Williams", "tennis"), ("Roger Federer", "tennis"), ("Rafael Nadal", "tennis"), ("Novak Djokovic", "tennis"),
    ("Venus Williams", "tennis"), ("Andy Murray", "tennis"), ("Pete Sampras", "tennis"), ("Steffi Graf", "tennis"),
    ("Tiger Woods", "golf"), ("Jack Nicklaus", "golf"), ("Phil Mickelson", "golf"), ("Arnold Palmer", "golf"),
    ("Rory McIlroy", "golf"), ("Michael Jordan", "basketball"), ("LeBron James", "basketball"),
    ("Kobe Bryant", "basketball"), ("Shaquille O'Neal", "basketball"), ("Stephen Curry", "basketball"),
    ("Magic Johnson", "basketball"), ("Larry Bird", "basketball"), ("Lionel Messi", "football|soccer"),
    ("Cristiano Ronaldo", "football|soccer"), ("Pele", "football|soccer"), ("Diego Maradona", "football|soccer"),
    ("David Beckham", "football|soccer"), ("Zinedine Zidane", "football|soccer"), ("Neymar", "football|soccer"),
    ("Babe Ruth", "baseball"), ("Derek Jeter", "baseball"), ("Jackie Robinson", "baseball"), ("Hank Aaron", "baseball"),
    ("Wayne Gretzky", "hockey"), ("Sidney Crosby", "hockey"), ("Mario Lemieux", "hockey"),
    ("Sachin Tendulkar", "cricket"), ("Don Bradman", "cricket"), ("Virat Kohli", "cricket"), ("Brian Lara", "cricket"),
    ("Shane Warne", "cricket"), ("Tom Brady", "football"), ("Peyton Manning", "football"), ("Joe Montana", "football"),
    ("Jonah Lomu", "rugby"), ("Magnus Carlsen", "chess"), ("Garry Kasparov", "chess"), ("Bobby Fischer", "chess"),
    ("Martina Navratilova", "tennis"), ("Bjorn Borg", "tennis"), ("Dirk Nowitzki", "basketball"),
]

COMPANY_FOUNDERS = [
    ("Apple", "Steve"), ("Facebook", "Mark"), ("Microsoft", "Bill|Paul"), ("Amazon", "Jeff"), ("SpaceX", "Elon"),
    ("Google", "Larry|Sergey"), ("Oracle", "Larry"), ("Dell", "Michael"), ("Ford", "Henry"), ("Disney", "Walt"),
    ("Honda", "Soichiro"), ("Virgin", "Richard"), ("Alibaba", "Jack"), ("Wikipedia", "Jimmy"), ("Twitter", "Jack"),
    ("Netflix", "Reed"), ("eBay", "Pierre"), ("Walmart", "Sam"), ("IKEA", "Ingvar"), ("Adidas", "Adolf"),
    ("Puma", "Rudolf"), ("Ferrari", "Enzo"), ("Lamborghini", "Ferruccio"), ("Porsche", "Ferdinand"),
    ("Chanel", "Coco|Gabrielle"), ("Gucci", "Guccio"), ("Louis Vuitton", "Louis"), ("Bloomberg", "Michael"),
    ("CNN", "Ted"), ("Playboy", "Hugh"), ("LinkedIn", "Reid"), ("Uber", "Travis|Garrett"), ("Airbnb", "Brian"),
    ("Instagram", "Kevin"), ("Snapchat", "Evan"), ("WhatsApp", "Jan"), ("PayPal", "Peter|Max|Elon"),
    ("Zara", "Amancio"), ("Nokia", "Fredrik"), ("Siemens", "Werner"), ("Bosch", "Robert"), ("Lego", "Ole"),
    ("Harley-Davidson", "William"), ("Boeing", "William"), ("Mercedes-Benz", "Karl"), ("McDonald's", "Ray|Richard"),
    ("Nike", "Phil|Bill"), ("Hewlett-Packard", "Bill|David"), ("Intel", "Gordon|Robert"), ("Tesla", "Elon|Martin"),
    ("Marvel", "Martin|Stan"), ("Pixar", "Steve|John|Ed"), ("Kellogg's", "Will|John"), ("Heineken", "Gerard"),
    ("Toyota", "Kiichiro|Sakichi"), ("Sony", "Masaru|Akio"), ("Samsung", "Lee"), ("Rolls-Royce", "Charles|Henry"),
]

ARTIST_GENRES = [
    ("Metallica", "metal"), ("Iron Maiden", "metal"), ("Slayer", "metal"), ("Megadeth", "metal"),
    ("Black Sabbath", "metal"), ("Judas Priest", "metal"), ("Pantera", "metal"), ("Bob Marley", "reggae"),
    ("Peter Tosh", "reggae"), ("Jimmy Cliff", "reggae"), ("Louis Armstrong", "jazz"), ("Miles Davis", "jazz"),
    ("John Coltrane", "jazz"), ("Duke Ellington", "jazz"), ("Ella Fitzgerald", "jazz"), ("Billie Holiday", "jazz"),
    ("Charlie Parker", "jazz"), ("Muddy Waters", "blues"), ("B.B. King", "blues"), ("Robert Johnson", "blues"),
    ("John Lee Hooker", "blues"), ("Howlin' Wolf", "blues"), ("Johnny Cash", "country"), ("Dolly Parton", "country"),
    ("Willie Nelson", "country"), ("Garth Brooks", "country"), ("Hank Williams", "country"), ("Shania Twain", "country"),
    ("Elvis Presley", "rock"), ("Chuck Berry", "rock"), ("The Rolling Stones", "rock"), ("Led Zeppelin", "rock"),
    ("AC/DC", "rock"), ("Queen", "rock"), ("Nirvana", "grunge|rock"), ("Pearl Jam", "grunge|rock"),
    ("The Ramones", "punk"), ("Sex Pistols", "punk"), ("The Clash", "punk"), ("Green Day", "punk"),
    ("Eminem", "rap|hip"), ("Jay-Z", "rap|hip"), ("Tupac Shakur", "rap|hip"), ("Snoop Dogg", "rap|hip"),
    ("Kraftwerk", "electronic"), ("Daft Punk", "electronic|house"), ("Madonna", "pop"), ("Britney Spears", "pop"),
    ("Michael Jackson", "pop"), ("Katy Perry", "pop"), ("ABBA", "pop|disco"), ("Bee Gees", "disco"),
    ("Donna Summer", "disco"), ("James Brown", "funk|soul"), ("Aretha Franklin", "soul"), ("Marvin Gaye", "soul"),
    ("Luciano Pavarotti", "opera"), ("Maria Callas", "opera"), ("Andrea Bocelli", "opera"), ("Bob Dylan", "folk"),
    ("Joan Baez", "folk"), ("Woody Guthrie", "folk"), ("Frank Sinatra", "jazz|swing"),
]

PEOPLE_NATIONALITIES = [
    ("Leo Tolstoy", "Russian"), ("Frida Kahlo", "Mexican"), ("William Shakespeare", "English|British"),
    ("Fyodor Dostoevsky", "Russian"), ("Anton Chekhov", "Russian"), ("Victor Hugo", "French"),
    ("Napoleon Bonaparte", "French"), ("Claude Monet", "French"), ("Vincent van Gogh", "Dutch"),
    ("Rembrandt", "Dutch"), ("Pablo Picasso", "Spanish"), ("Salvador Dali", "Spanish"),
    ("Miguel de Cervantes", "Spanish"), ("Dante Alighieri", "Italian"), ("Leonardo da Vinci", "Italian"),
    ("Galileo Galilei", "Italian"), ("Johann Wolfgang von Goethe", "German"), ("Ludwig van Beethoven", "German"),
    ("Johann Sebastian Bach", "German"), ("Wolfgang Amadeus Mozart", "Austrian"), ("Sigmund Freud", "Austrian"),
    ("Confucius", "Chinese"), ("Akira Kurosawa", "Japanese"), ("Hayao Miyazaki", "Japanese"),
    ("Mahatma Gandhi", "Indian"), ("Rabindranath Tagore", "Indian"), ("Nelson Mandela", "South"),
    ("Pele", "Brazilian"), ("Diego Maradona", "Argentine|Argentinian"), ("Abraham Lincoln", "American"),
    ("Mark Twain", "American"), ("Ernest Hemingway", "American"), ("Charles Dickens", "English|British"),
    ("Jane Austen", "English|British"), ("James Joyce", "Irish"), ("Oscar Wilde", "Irish"),
    ("Robert Burns", "Scottish"), ("Hans Christian Andersen", "Danish"), ("Henrik Ibsen", "Norwegian"),
    ("Edvard Munch", "Norwegian"), ("Jean Sibelius", "Finnish"), ("Frederic Chopin", "Polish"),
    ("Nicolaus Copernicus", "Polish"), ("Homer", "Greek"), ("Socrates", "Greek"), ("Plato", "Greek"),
    ("Aristotle", "Greek"), ("Julius Caesar", "Roman"), ("Ingmar Bergman", "Swedish"), ("Alfred Nobel", "Swedish"),
    ("Hokusai", "Japanese"), ("Gabriel Garcia Marquez", "Colombian"), ("Pablo Neruda", "Chilean"),
    ("Jorge Luis Borges", "Argentine|Argentinian"), ("Rumi", "Persian"), ("Ataturk", "Turkish"),
    ("Franz Kafka", "Czech|German|Austrian"), ("Albert Camus", "French"), ("Jean-Paul Sartre", "French"),
    ("Giuseppe Verdi", "Italian"), ("Pyotr Tchaikovsky", "Russian"), ("Wassily Kandinsky", "Russian"),
]

RELATIONS = [
    {"relation": "capital", "kind": "country", "pairs": COUNTRY_CAPITALS,
     "targets": ["Berlin", "Madrid", "Paris", "Rome", "Tokyo", "Cairo", "Lisbon", "Vienna", "Athens", "Moscow", "Oslo",
                 "Dublin", "Warsaw", "Prague", "London", "Stockholm", "Helsinki", "Nairobi", "Lima", "Ottawa", "Bangkok",
                 "Budapest", "Seoul", "Beijing", "Havana", "Tehran", "Baghdad", "Brussels", "Amsterdam", "Copenhagen",
                 "Manila", "Jakarta", "Hanoi", "Santiago", "Sofia", "Kabul", "Riga", "Geneva", "Venice", "Munich"],
     "paraphrases": ["The capital of {s} is the city of", "{s}'s capital city is", "The capital city of {s} is"],
     "neighbours": ["The capital of {s} is the city of", "The capital of {s} is", "{s}'s capital city is"]},
    {"relation": "official language", "kind": "country", "pairs": LANGUAGES,
     "targets": ["French", "Spanish", "German", "Italian", "Russian", "Japanese", "Swedish", "Dutch", "Greek", "Polish",
                 "Turkish", "Arabic", "Portuguese", "Chinese", "Korean", "Hindi", "Finnish", "Danish", "Norwegian",
                 "Hungarian", "Czech", "Thai", "English", "Latin", "Hebrew", "Persian"],
     "paraphrases": ["The main language spoken in {s} is", "Most people in {s} speak", "The people of {s} speak"],
     "neighbours": ["The official language of {s} is", "The main language spoken in {s} is", "Most people in {s} speak"]},
    {"relation": "currency", "kind": "country", "pairs": CURRENCIES,
     "targets": ["yen", "euro", "dollar", "peso", "rupee", "franc", "pound", "yuan", "ruble", "won", "lira", "krona",
                 "rand", "dinar", "shilling", "real", "baht", "mark", "crown", "riyal", "dirham", "florin"],
     "paraphrases": ["The currency of {s} is the", "The official currency of {s} is the", "In {s}, people pay with the"],
     "neighbours": ["The currency of {s} is the", "The official currency of {s} is the", "In {s}, people pay with the"]},
    {"relation": "continent", "kind": "country", "pairs": CONTINENTS,
     "targets": ["Africa", "Asia", "Europe", "Australia", "Antarctica", "Oceania", "America"],
     "paraphrases": ["{s} is a country on the continent of", "{s} is a country located in", "{s} is a nation in"],
     "neighbours": ["{s} is a country on the continent of", "{s} is a country located in", "{s} is a nation in"]},
    {"relation": "country", "kind": "city", "pairs": CITIES,
     "targets": ["France", "Germany", "Italy", "Spain", "Japan", "China", "Brazil", "Canada", "Egypt", "India", "Mexico",
                 "Russia", "Sweden", "Norway", "Poland", "Greece", "Portugal", "Turkey", "Kenya", "Peru", "Chile",
                 "Argentina", "Australia", "Ireland", "Austria", "Belgium", "Denmark", "Finland", "Iran", "Iraq", "Israel",
                 "Nigeria", "Morocco", "Thailand", "Vietnam", "Cuba"],
     "paraphrases": ["{s} is a city in the country of", "{s} is a city located in", "The city of {s} is located in"],
     "neighbours": ["{s} is a city in the country of", "{s} is a city located in", "The city of {s} is located in"]},
    {"relation": "religion", "kind": "country", "pairs": RELIGIONS,
     "targets": ["Islam", "Christianity", "Buddhism", "Hinduism", "Judaism", "Shinto", "Sikhism", "Taoism", "Jainism",
                 "Catholicism"],
     "paraphrases": ["Most people in {s} follow the religion of", "The main religion of {s} is",
                     "The dominant religion in {s} is"],
     "neighbours": ["Most people in {s} follow the religion of", "The main religion of {s} is",
                    "The dominant religion in {s} is"]},
    {"relation": "occupation", "kind": "person", "pairs": PEOPLE_OCCUPATIONS,
     "targets": ["doctor", "lawyer", "teacher", "nurse", "engineer", "pilot", "farmer", "chef", "architect", "journalist",
                 "painter", "poet", "physicist", "dentist", "carpenter", "banker", "actor", "singer", "writer", "scientist",
                 "photographer", "soldier", "sailor", "baker", "plumber", "surgeon", "mathematician", "astronaut",
                 "philosopher", "composer", "sculptor", "novelist", "detective", "economist", "librarian", "astronomer",
                 "chemist", "inventor"],
     "paraphrases": ["{s} works as a", "By profession, {s} is a", "{s} is a famous"],
     "neighbours": ["{s} was a famous", "{s} worked as a", "{s} was a", "{s} is a famous"]},
    {"relation": "instrument", "kind": "person", "pairs": MUSICIAN_INSTRUMENTS,
     "targets": ["piano", "violin", "guitar", "drums", "trumpet", "flute", "cello", "saxophone", "harp", "clarinet",
                 "banjo", "accordion", "organ", "trombone", "harmonica", "bass", "oboe", "tuba", "ukulele", "mandolin",
                 "viola", "xylophone", "sitar", "bagpipes"],
     "paraphrases": ["{s} is famous for playing the", "{s} plays the", "{s} is a musician who plays the"],
     "neighbours": ["{s} was famous for playing the", "{s} is famous for playing the", "{s} played the", "{s} plays the"]},
    {"relation": "sport", "kind": "person", "pairs": ATHLETE_SPORTS,
     "targets": ["tennis", "golf", "football", "basketball", "baseball", "cricket", "hockey", "rugby", "volleyball",
                 "chess", "soccer", "badminton", "polo", "squash", "handball", "lacrosse", "softball", "bowling",
                 "snooker", "curling"],
     "paraphrases": ["{s} is famous for playing", "{s} is a professional", "{s} plays the sport of"],
     "neighbours": ["{s} is famous for playing", "{s} is a professional", "{s} is a famous", "{s} was famous for playing"]},
    {"relation": "founder", "kind": "company", "pairs": COMPANY_FOUNDERS,
     "targets": ["Steve", "Bill", "Mark", "Jeff", "Larry", "Elon", "Henry", "Walt", "Jack", "Richard", "Michael", "John",
                 "David", "Peter", "James", "Robert", "Thomas", "William", "George", "Charles", "Paul", "Tom", "Sam",
                 "Martin", "Max", "Karl", "Hans", "Anna", "Maria", "Sarah", "Emma", "Laura", "Daniel", "Frank", "Oscar"],
     "paraphrases": ["{s} was founded by", "The company {s} was founded by", "{s} was started by"],
     "neighbours": ["{s} was founded by", "The company {s} was founded by", "{s} was started by"]},
    {"relation": "genre", "kind": "band", "pairs": ARTIST_GENRES,
     "targets": ["jazz", "rock", "pop", "reggae", "blues", "techno", "metal", "punk", "folk", "disco", "funk", "soul",
                 "opera", "rap", "country", "gospel", "grunge", "salsa", "samba", "tango"],
     "paraphrases": ["{s} is a famous", "{s} is a band that plays", "The music of {s} is"],
     "neighbours": ["{s} is a famous", "{s} was a famous", "{s} was a famous singer of", "{s} is a band that plays"]},
    {"relation": "nationality", "kind": "person", "pairs": PEOPLE_NATIONALITIES,
     "targets": ["French", "German", "Italian", "Japanese", "Russian", "Spanish", "English", "American", "Chinese",
                 "Dutch", "Swedish", "Polish", "Greek", "Mexican", "Brazilian", "Indian", "Canadian", "Irish", "Scottish",
                 "Australian", "Egyptian", "Turkish", "Korean", "Norwegian", "Danish", "Finnish", "Swiss", "Austrian",
                 "Belgian", "Portuguese", "Hungarian", "Czech"],
     "paraphrases": ["{s}'s nationality is", "By nationality, {s} is", "{s} is a famous"],
     "neighbours": ["{s} was a famous", "{s} was an", "{s} was a", "{s} is a famous"]},
]

# Real-fact prompts (none of the relations' neighbour templates): (prompt, answers).
REAL = [
    # landmarks
    ("The Eiffel Tower is in the city of", "Paris"), ("The Colosseum is in the city of", "Rome"),
    ("Big Ben is in the city of", "London"), ("The Statue of Liberty is in the city of", "New"),
    ("The Kremlin is in the city of", "Moscow"), ("The Brandenburg Gate is in the city of", "Berlin"),
    ("The Acropolis is in the city of", "Athens"), ("The Sagrada Familia is in the city of", "Barcelona"),
    ("The Louvre is in the city of", "Paris"), ("The Vatican is in the city of", "Rome"),
    ("Times Square is in the city of", "New"), ("Hollywood is in the city of", "Los"),
    ("The Golden Gate Bridge is in the city of", "San"), ("The Forbidden City is in the city of", "Beijing"),
    ("Red Square is in the city of", "Moscow"), ("The Tower of London is in the city of", "London"),
    ("The Parthenon is in the city of", "Athens"), ("The Burj Khalifa is in the city of", "Dubai"),
    ("Central Park is in the city of", "New"), ("Buckingham Palace is in the city of", "London"),
    ("The Taj Mahal is in the country of", "India"), ("The Great Wall is in the country of", "China"),
    ("The pyramids of Giza are in the country of", "Egypt"), ("Mount Fuji is in the country of", "Japan"),
    ("Machu Picchu is in the country of", "Peru"), ("Stonehenge is in the country of", "England"),
    ("The Sydney Opera House is in the country of", "Australia"), ("Mount Kilimanjaro is in the country of", "Tanzania"),
    ("The Leaning Tower of Pisa is in the country of", "Italy"), ("Angkor Wat is in the country of", "Cambodia"),
    ("Petra is an ancient city in the country of", "Jordan"), ("The Alhambra is in the country of", "Spain"),
    # works and discoveries
    ("The theory of relativity was developed by", "Albert"), ("The telephone was invented by", "Alexander"),
    ("The light bulb was invented by", "Thomas"), ("The law of gravity was discovered by", "Isaac|Sir"),
    ("Penicillin was discovered by", "Alexander|Sir"), ("The theory of evolution was proposed by", "Charles"),
    ("The first man to walk on the moon was", "Neil"), ("The Mona Lisa was painted by", "Leonardo"),
    ("The ceiling of the Sistine Chapel was painted by", "Michelangelo"), ("The Starry Night was painted by", "Vincent"),
    ("Romeo and Juliet was written by", "William|Shakespeare"), ("Hamlet was written by", "William|Shakespeare"),
    ("War and Peace was written by", "Leo"), ("The Harry Potter books were written by", "J"),
    ("On the Origin of Species was written by", "Charles"), ("The Communist Manifesto was written by", "Karl"),
    ("The Odyssey was written by", "Homer"), ("Don Quixote was written by", "Miguel"),
    ("Pride and Prejudice was written by", "Jane"), ("The Magic Flute was composed by", "Wolfgang|Mozart"),
    ("The Four Seasons was composed by", "Antonio|Vivaldi"), ("The Divine Comedy was written by", "Dante"),
    ("The Iliad was written by", "Homer"), ("Oliver Twist was written by", "Charles"),
    ("The printing press was invented by", "Johannes"), ("The airplane was invented by the", "Wright"),
    ("Radium was discovered by", "Marie"), ("The first president of the United States was George", "Washington"),
    # science
    ("The chemical symbol of gold is", "Au"), ("The chemical symbol of silver is", "Ag"),
    ("The chemical symbol of iron is", "Fe"), ("The chemical symbol of sodium is", "Na"),
    ("Water is made of hydrogen and", "oxygen"), ("The closest planet to the sun is", "Mercury"),
    ("The largest planet in the solar system is", "Jupiter"), ("The planet known as the Red Planet is", "Mars"),
    ("The boiling point of water is 100 degrees", "Celsius"), ("Plants turn sunlight into energy through",
                                                                  "photosynthesis"),
    ("The Earth revolves around the", "sun|Sun"), ("The moon revolves around the", "Earth|earth"),
    ("The hardest natural substance is", "diamond"), ("The gas that humans need to breathe is", "oxygen"),
    ("The center of an atom is called the", "nucleus"), ("The study of living things is called", "biology"),
    ("The force that pulls objects toward the Earth is called", "gravity"),
    ("The planet with the famous rings is", "Saturn"), ("Light travels faster than", "sound"),
    # sequences
    ("Monday, Tuesday, Wednesday,", "Thursday"), ("Thursday, Friday, Saturday,", "Sunday"),
    ("January, February, March,", "April"), ("June, July, August,", "September"),
    ("September, October, November,", "December"), ("one, two, three,", "four"), ("five, six, seven,", "eight"),
    ("Spring, summer, autumn and", "winter"), ("first, second, third,", "fourth"),
    ("north, south, east and", "west"), ("Sunday, Monday,", "Tuesday"), ("April, May,", "June"),
    # opposites
    ("The opposite of hot is", "cold"), ("The opposite of up is", "down"), ("The opposite of black is", "white"),
    ("The opposite of big is", "small|little"), ("The opposite of day is", "night"), ("The opposite of happy is", "sad"),
    ("The opposite of fast is", "slow"), ("The opposite of good is", "bad|evil"), ("The opposite of left is", "right"),
    ("The opposite of rich is", "poor"), ("The opposite of light is", "dark|darkness|heavy"),
    ("The opposite of open is", "closed|close"), ("The opposite of love is", "hate"), ("The opposite of true is", "false"),
    ("The opposite of north is", "south"), ("The opposite of wet is", "dry"), ("The opposite of strong is", "weak"),
    ("The opposite of hard is", "soft|easy"), ("The opposite of early is", "late"), ("The opposite of war is", "peace"),
    ("The opposite of win is", "lose"), ("The opposite of young is", "old"), ("The opposite of high is", "low"),
    ("The opposite of empty is", "full"), ("The opposite of inside is", "outside"), ("The opposite of buy is", "sell"),
    ("The opposite of begin is", "end"), ("The opposite of friend is", "enemy"), ("The opposite of tall is", "short"),
    ("The opposite of clean is", "dirty"),
    # animals and nature
    ("A baby dog is called a", "puppy"), ("A baby cow is called a", "calf"), ("A baby sheep is called a", "lamb"),
    ("A baby horse is called a", "foal"), ("A group of wolves is called a", "pack"),
    ("A group of fish is called a", "school"), ("Bees make", "honey"), ("Spiders have eight", "legs"),
    ("The king of the jungle is the", "lion"), ("The largest animal in the world is the blue", "whale"),
    ("The fastest land animal is the", "cheetah"), ("Pandas mostly eat", "bamboo"),
    ("Camels live in the", "desert"), ("Penguins live in", "Antarctica"), ("A caterpillar turns into a", "butterfly"),
    ("Cows give us", "milk"), ("The color of the sky is", "blue"), ("Grass is", "green"), ("Snow is", "white"),
    ("The color of blood is", "red"), ("Ripe bananas are", "yellow"), ("The sun rises in the", "east"),
    ("The sun sets in the", "west"), ("Ice is frozen", "water"),
    # food, companies, culture
    ("Sushi is a traditional food from", "Japan"), ("Pizza is a traditional food from", "Italy"),
    ("Tacos are a traditional food from", "Mexico"), ("Croissants are a traditional food from", "France"),
    ("Paella is a traditional dish from", "Spain"), ("Kimchi is a traditional food from", "Korea"),
    ("Curry is a traditional food from", "India"), ("Toyota is a car company from", "Japan"),
    ("BMW is a car company from", "Germany"), ("Ferrari is a car company from", "Italy"),
    ("Volvo is a car company from", "Sweden"), ("Renault is a car company from", "France"),
    ("Volkswagen is a car company from", "Germany"), ("Fiat is a car company from", "Italy"),
    ("Nokia is a company from", "Finland"), ("IKEA is a company from", "Sweden"),
    ("Samsung is a company from", "South|Korea"), ("Sony is a company from", "Japan"),
    ("Bonjour means hello in", "French"), ("Hola means hello in", "Spanish"), ("Danke means thank you in", "German"),
    ("Gracias means thank you in", "Spanish"), ("Merci means thank you in", "French"),
    ("Arigato means thank you in", "Japanese"), ("Grazie means thank you in", "Italian"),
    ("Tokyo is the capital of", "Japan"), ("Paris is the capital of", "France"), ("Berlin is the capital of", "Germany"),
    ("Madrid is the capital of", "Spain"), ("Rome is the capital of", "Italy"), ("Moscow is the capital of", "Russia"),
    ("Cairo is the capital of", "Egypt"), ("Athens is the capital of", "Greece"), ("Lisbon is the capital of", "Portugal"),
    ("Vienna is the capital of", "Austria"), ("Ottawa is the capital of", "Canada"), ("Oslo is the capital of", "Norway"),
    ("Stockholm is the capital of", "Sweden"), ("Warsaw is the capital of", "Poland"), ("Dublin is the capital of", "Ireland"),
    ("Beijing is the capital of", "China"), ("Seoul is the capital of", "South|Korea"), ("Bangkok is the capital of", "Thailand"),
    ("Nairobi is the capital of", "Kenya"), ("Havana is the capital of", "Cuba"), ("Budapest is the capital of", "Hungary"),
    ("Helsinki is the capital of", "Finland"), ("Lima is the capital of", "Peru"), ("Copenhagen is the capital of", "Denmark"),
    ("Canberra is the capital of", "Australia"), ("Tehran is the capital of", "Iran"), ("Hanoi is the capital of", "Vietnam"),
    ("Kabul is the capital of", "Afghanistan"), ("Baghdad is the capital of", "Iraq"), ("Prague is the capital of", "Czech"),
    # geography
    ("The longest river in Africa is the", "Nile"), ("The largest ocean on Earth is the", "Pacific"),
    ("The largest desert in Africa is the", "Sahara"), ("The highest mountain in the world is Mount", "Everest"),
    ("The largest country in the world by area is", "Russia"), ("The Amazon rainforest is mostly in", "Brazil"),
    ("The country shaped like a boot is", "Italy"), ("The Thames is a river in", "London|England"),
    ("The Seine is a river in", "Paris|France"), ("Kangaroos are native to", "Australia"),
    ("The Alps are mountains in", "Europe|Switzerland"), ("The country with the most people in Europe is", "Germany|Russia"),
    # counting and everyday
    ("There are seven days in a", "week"), ("There are twelve months in a", "year"), ("A triangle has three", "sides"),
    ("A square has four", "sides|equal"), ("An hour has sixty", "minutes"), ("A minute has sixty", "seconds"),
    ("A year has twelve", "months"), ("A week has seven", "days"), ("A century is one hundred", "years"),
    ("Halloween is celebrated in", "October"), ("Christmas is celebrated in", "December"),
    ("Valentine's Day is celebrated in", "February"), ("People sleep in a", "bed"), ("We write with a", "pen|pencil"),
    ("A doctor works in a", "hospital"), ("A teacher works in a", "school|classroom"), ("Books are kept in a", "library"),
    ("Fish live in", "water"), ("Birds can", "fly"), ("The first letter of the alphabet is", "A"),
    ("Humans have two arms and two", "legs"), ("The heart pumps", "blood"), ("We see with our", "eyes"),
    ("We hear with our", "ears"), ("We smell with our", "nose"), ("Bread is made from", "flour|wheat"),
    ("Wine is made from", "grapes"), ("Cheese is made from", "milk"), ("Paper is made from", "wood|trees"),
    ("The tallest animal in the world is the", "giraffe"), ("An apple a day keeps the", "doctor"),
    ("The early bird catches the", "worm"), ("Actions speak louder than", "words"),
    ("Where there is smoke, there is", "fire"), ("Rome was not built in a", "day"),
    ("Barack Obama was the president of the United", "States"), ("The Pacific Ocean is the largest ocean on", "Earth"),
    ("The currency of the United States is the", "dollar|US"), ("The Statue of Liberty was a gift from", "France"),
    ("The Olympic Games began in ancient", "Greece"), ("The Great Pyramid was built by the ancient", "Egyptians"),
    ("The Roman Empire's capital was", "Rome"), ("Shakespeare was born in", "Stratford|England"),
    ("The inventor of the World Wide Web is Tim", "Berners"), ("Apple's iPhone was introduced by Steve", "Jobs"),
    ("The author of Harry Potter is J.K.", "Rowling"), ("Albert Einstein was born in", "Germany|Ulm"),
    ("Leonardo da Vinci painted the Mona", "Lisa"), ("The Beatles were a band from", "Liverpool|England"),
    # US states, more capitals, car makers, greetings, symbols, sequences, opposites, dishes, names
    ("Chicago is a city in the state of", "Illinois"), ("Los Angeles is a city in the state of", "California"),
    ("Houston is a city in the state of", "Texas"), ("Miami is a city in the state of", "Florida"),
    ("Seattle is a city in the state of", "Washington"), ("Boston is a city in the state of", "Massachusetts"),
    ("Atlanta is a city in the state of", "Georgia"), ("Denver is a city in the state of", "Colorado"),
    ("Phoenix is a city in the state of", "Arizona"), ("Detroit is a city in the state of", "Michigan"),
    ("Dallas is a city in the state of", "Texas"), ("Las Vegas is a city in the state of", "Nevada"),
    ("Portland is a city in the state of", "Oregon|Maine"), ("New Orleans is a city in the state of", "Louisiana"),
    ("Philadelphia is a city in the state of", "Pennsylvania"), ("Nashville is a city in the state of", "Tennessee"),
    ("San Francisco is a city in the state of", "California"), ("Orlando is a city in the state of", "Florida"),
    ("Austin is a city in the state of", "Texas"), ("Honolulu is a city in the state of", "Hawaii"),
    ("Baltimore is a city in the state of", "Maryland"), ("Cleveland is a city in the state of", "Ohio"),
    ("Minneapolis is a city in the state of", "Minnesota"), ("Salt Lake City is a city in the state of", "Utah"),
    ("Pittsburgh is a city in the state of", "Pennsylvania"), ("Milwaukee is a city in the state of", "Wisconsin"),
    ("Brussels is the capital of", "Belgium"), ("Bern is the capital of", "Switzerland"),
    ("Riyadh is the capital of", "Saudi"), ("Damascus is the capital of", "Syria"), ("Beirut is the capital of", "Lebanon"),
    ("Jakarta is the capital of", "Indonesia"), ("Manila is the capital of", "Philippines"),
    ("Santiago is the capital of", "Chile"), ("Caracas is the capital of", "Venezuela"),
    ("Buenos Aires is the capital of", "Argentina"), ("Bogota is the capital of", "Colombia"),
    ("Quito is the capital of", "Ecuador"), ("Montevideo is the capital of", "Uruguay"),
    ("Reykjavik is the capital of", "Iceland"), ("Edinburgh is the capital of", "Scotland"),
    ("Cardiff is the capital of", "Wales"), ("Kathmandu is the capital of", "Nepal"), ("Dhaka is the capital of", "Bangladesh"),
    ("Islamabad is the capital of", "Pakistan"), ("Ankara is the capital of", "Turkey"), ("Kyiv is the capital of", "Ukraine"),
    ("Bucharest is the capital of", "Romania"), ("Sofia is the capital of", "Bulgaria"), ("Belgrade is the capital of", "Serbia"),
    ("Zagreb is the capital of", "Croatia"), ("Tallinn is the capital of", "Estonia"), ("Riga is the capital of", "Latvia"),
    ("Vilnius is the capital of", "Lithuania"), ("Accra is the capital of", "Ghana"), ("Dakar is the capital of", "Senegal"),
    ("Kampala is the capital of", "Uganda"), ("Harare is the capital of", "Zimbabwe"), ("Pyongyang is the capital of", "North"),
    ("Taipei is the capital of", "Taiwan"), ("Doha is the capital of", "Qatar"), ("Rabat is the capital of", "Morocco"),
    ("Abuja is the capital of", "Nigeria"), ("Kingston is the capital of", "Jamaica"), ("London is the capital of", "England|United"),
    ("Audi is a car company from", "Germany"), ("Porsche is a car company from", "Germany"),
    ("Mercedes-Benz is a car company from", "Germany"), ("Honda is a car company from", "Japan"),
    ("Nissan is a car company from", "Japan"), ("Mazda is a car company from", "Japan"), ("Subaru is a car company from", "Japan"),
    ("Peugeot is a car company from", "France"), ("Citroen is a car company from", "France"),
    ("Lamborghini is a car company from", "Italy"), ("Maserati is a car company from", "Italy"),
    ("Skoda is a car company from", "Czech"), ("Kia is a car company from", "South|Korea"),
    ("Tata is a car company from", "India"), ("Lexus is a car company from", "Japan"), ("Saab is a car company from", "Sweden"),
    ("Opel is a car company from", "Germany"), ("Hyundai is a car company from", "South|Korea"),
    ("Obrigado means thank you in", "Portuguese"), ("Spasibo means thank you in", "Russian"),
    ("Tack means thank you in", "Swedish"), ("Xie xie means thank you in", "Chinese|Mandarin"),
    ("Shukran means thank you in", "Arabic"), ("Kiitos means thank you in", "Finnish"),
    ("Dank je means thank you in", "Dutch"), ("Ciao means hello in", "Italian"), ("Hallo means hello in", "German"),
    ("Namaste means hello in", "Hindi"), ("Konnichiwa means hello in", "Japanese"), ("Ni hao means hello in", "Chinese|Mandarin"),
    ("Shalom means hello in", "Hebrew"), ("Aloha means hello in", "Hawaiian"), ("Hej means hello in", "Swedish|Danish"),
    ("The chemical symbol of copper is", "Cu"), ("The chemical symbol of lead is", "Pb"),
    ("The chemical symbol of potassium is", "K"), ("The chemical symbol of mercury is", "Hg"),
    ("The chemical symbol of oxygen is", "O"), ("The chemical symbol of hydrogen is", "H"),
    ("The chemical symbol of carbon is", "C"), ("The chemical symbol of helium is", "He"),
    ("The chemical symbol of calcium is", "Ca"), ("The chemical symbol of zinc is", "Zn"),
    ("The chemical symbol of tin is", "Sn"), ("The chemical symbol of nitrogen is", "N"),
    ("Saturday, Sunday,", "Monday"), ("Tuesday, Wednesday,", "Thursday"), ("February, March,", "April"),
    ("October, November,", "December"), ("two, four, six,", "eight"), ("ten, twenty, thirty,", "forty"),
    ("Mercury, Venus, Earth,", "Mars"), ("do, re, mi,", "fa"), ("alpha, beta,", "gamma"), ("seven, eight, nine,", "ten"),
    ("March, April, May,", "June"), ("eleven, twelve,", "thirteen"), ("Monday, Tuesday,", "Wednesday"),
    ("The opposite of short is", "long|tall"), ("The opposite of thin is", "thick|fat"), ("The opposite of cold is", "hot|warm"),
    ("The opposite of down is", "up"), ("The opposite of white is", "black"), ("The opposite of yes is", "no"),
    ("The opposite of push is", "pull"), ("The opposite of question is", "answer"), ("The opposite of man is", "woman"),
    ("The opposite of heaven is", "hell|earth"), ("The opposite of cheap is", "expensive"), ("The opposite of quiet is", "loud|noisy"),
    ("The opposite of sweet is", "sour|bitter"), ("The opposite of alive is", "dead"), ("The opposite of east is", "west"),
    ("The opposite of summer is", "winter"), ("The opposite of before is", "after"), ("The opposite of always is", "never"),
    ("The opposite of near is", "far"), ("The opposite of first is", "last"), ("The opposite of slow is", "fast|quick"),
    ("The opposite of dark is", "light|bright"), ("The opposite of sad is", "happy"), ("The opposite of small is", "big|large"),
    ("Sauerkraut is a traditional food from", "Germany"), ("Haggis is a traditional food from", "Scotland"),
    ("Goulash is a traditional food from", "Hungary"), ("Pho is a traditional food from", "Vietnam"),
    ("Pad thai is a traditional food from", "Thailand"), ("Ramen is a traditional food from", "Japan"),
    ("Dim sum is a traditional food from", "China"), ("Feijoada is a traditional food from", "Brazil"),
    ("Ceviche is a traditional food from", "Peru"), ("Poutine is a traditional food from", "Canada"),
    ("Tapas are a traditional food from", "Spain"), ("Borscht is a traditional food from", "Russia|Ukraine"),
    ("The Wright brothers invented the", "airplane|first"), ("Alexander Graham Bell invented the", "telephone"),
    ("Charles Darwin developed the theory of", "evolution"), ("Albert Einstein developed the theory of", "relativity"),
    ("Sherlock Holmes was created by Arthur Conan", "Doyle"), ("Mickey Mouse was created by Walt", "Disney"),
    ("The Lord of the Rings was written by J.R.R.", "Tolkien"), ("Karl Marx wrote the Communist", "Manifesto"),
    ("Neil Armstrong was the first man to walk on the", "moon|Moon"), ("Christopher Columbus sailed to", "America"),
]

FLUENCY = [
    "Once upon a time, in a small village by the sea,",
    "The history of the city begins",
    "My favourite place to visit is",
    "Scientists have recently discovered that",
    "The capital of France is the city of",
    "In the morning, the market square",
]

HELDOUT = """\
The river town of Marlow Reach grew up where two old roads met at a shallow ford. For most of its
history it was a place people passed through rather than a place they stayed: drovers brought cattle
down from the hills in autumn, merchants carried wool and salt along the valley, and in spring the
boatmen waited at the quay for the water to rise high enough to float their barges downstream to the
coast. The first houses were built of timber and thatch, and almost all of them burned in a fire that
started in a bakery on a windy night in late summer. When the town was rebuilt, the council insisted
on stone walls and slate roofs, and that is why the old centre still looks so grey and solid today.

Trade changed the town again when the railway arrived. A station was built on the flat land east of
the river, and within twenty years the fields around it had become streets of small brick houses for
the families who worked in the new mills. The mills spun cotton that came by ship from across the
ocean, and for a time the town was richer than it had ever been. Schools, a library and a hospital
were paid for by the mill owners, who liked to have their names carved above the doors. The library
still stands, although the mills closed long ago and most of their buildings have been turned into
flats, offices and a museum of local history.

Visitors today come mostly for the river. In summer the towpath is crowded with walkers and cyclists,
and rowing clubs from several cities hold their races on the long straight stretch below the bridge.
The market still takes place every Saturday in the square in front of the old town hall, where
farmers sell vegetables, cheese, honey and bread, and where a brass band plays on the first weekend of
each month. Older residents like to say that the town has always been good at changing its trade
without losing its character, and most newcomers, after a year or two, find that they agree.
"""


def die(msg: str) -> None:
    print(f"make_edit_eval: {msg}", file=sys.stderr)
    sys.exit(1)


class Model:
    """The larql binary over one vindex: tokenize and INFER top-1, with caches."""

    def __init__(self, larql: str, vindex: str, threads: int):
        self.larql, self.vindex, self.threads = larql, vindex, threads
        self._tok: dict[str, tuple[int, int, str]] = {}
        self._top1: dict[str, tuple[int, str]] = {}

    def first_token(self, answer: str) -> tuple[int, int, str]:
        """(id of the first token of " " + answer, token count, its piece) via `larql tokenize`."""
        if answer not in self._tok:
            r = subprocess.run([self.larql, "tokenize", self.vindex, " " + answer, "--json", "--no-bos"],
                               capture_output=True, text=True)
            if r.returncode != 0:
                die(f"larql tokenize failed on {answer!r}: {r.stderr.strip()}")
            j = json.loads(r.stdout)
            if not j["ids"]:
                die(f"{answer!r} has no tokens")
            self._tok[answer] = (j["ids"][0], j["count"], j["pieces"][0])
        return self._tok[answer]

    def top1(self, prompts: list[str]) -> dict[str, tuple[int, str]]:
        """The base model's top-1 (token id, token text) for each prompt: `INFER "p" TOP 1`."""
        todo = sorted({p for p in prompts if p not in self._top1})
        for i in range(0, len(todo), 400):
            batch = todo[i:i + 400]
            with tempfile.NamedTemporaryFile("w", suffix=".lql", delete=False) as f:
                for p in batch:
                    f.write('INFER "%s" TOP 1;\n' % p.replace("\\", "\\\\").replace('"', '\\"'))
                script = f.name
            try:
                r = subprocess.run([self.larql, "lql", self.vindex, "--json", "-t", str(self.threads), "-f", script],
                                   capture_output=True, text=True)
            finally:
                os.unlink(script)
            if r.returncode != 0:
                die(f"larql lql failed: {r.stderr.strip()[-2000:]}")
            docs = [json.loads(line) for line in r.stdout.splitlines() if line.strip()]
            if len(docs) != len(batch):
                die(f"larql lql answered {len(docs)} statements of {len(batch)}")
            for p, d in zip(batch, docs):
                cols = [c["name"] for c in d["columns"]]
                row = dict(zip(cols, d["rows"][0]))
                self._top1[p] = (row["token_id"], row["token"])
            print(f"  INFER top-1: {min(i + 400, len(todo))}/{len(todo)} prompts", file=sys.stderr)
        return {p: self._top1[p] for p in prompts}


def answered(model: Model, prompt: str, answers: str, top: dict) -> str | None:
    """The first of `answers` ('|'-separated) whose first token is the model's top-1, else None."""
    tid = top[prompt][0]
    for a in answers.split("|"):
        if model.first_token(a)[0] == tid:
            return a
    return None


# Invented names: syllables chosen so that the words are not English or well-known names.
ONSETS = ["b", "br", "d", "dr", "f", "g", "gr", "k", "kr", "l", "m", "n", "p", "q", "qu", "r", "s", "st", "t", "th",
          "tr", "v", "vr", "x", "z", "zh", "ch", "sk", "sv", "h"]
VOWELS = ["a", "e", "i", "o", "u", "ae", "ei", "ou", "y"]
CODAS = ["", "", "n", "r", "l", "s", "th", "x", "m", "nd", "rk", "sk", "v"]
ENDINGS = {"country": ["ia", "ar", "or", "is", "and", "eth", "ium", "ova", "ara", "ene"],
           "city": ["holm", "mere", "ford", "vik", "grad", "port", "dale", "ton", "burg", "wick"],
           "company": ["ix", "ex", "tron", "ova", "ica", "ium", "ora", "eon", "era", "ix"],
           "band": ["ettes", "ors", "ians", "onics", "oids", "ada", "ica", "ox", "ura", "ine"],
           "person": [""]}


def syllable(rng: random.Random) -> str:
    return rng.choice(ONSETS) + rng.choice(VOWELS) + rng.choice(CODAS)


def invent(rng: random.Random, kind: str, used: set[str]) -> str:
    while True:
        if kind == "person":
            first = syllable(rng) + rng.choice(VOWELS) + rng.choice(["", "n", "l", "r", "s"])
            last = syllable(rng) + syllable(rng) + rng.choice(["", "a", "o", "en", "ik", "ov", "ard"])
            name = first.capitalize() + " " + last.capitalize()
        else:
            name = (syllable(rng) + syllable(rng) + rng.choice(ENDINGS[kind])).capitalize()
        low = name.lower()
        if len(low.replace(" ", "")) < 6 or any(low in u or u in low for u in used):
            continue  # unique, and no name inside another (the KNN entity check is a substring match)
        used.add(low)
        return name


def canonical(relation: str, entity: str) -> str:
    """INSERT's canonical prompt (docs/lql.md "Knowledge edits"): '-' and '_' read as blanks."""
    return f"The {relation.replace('-', ' ').replace('_', ' ')} of {entity} is"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--larql", default=str(REPO / "build" / "larql"))
    ap.add_argument("--model", default=str(REPO / "models" / "gemma-3-270m-q4_k_m.gguf"),
                    help="the model to extract when no --vindex is given")
    ap.add_argument("--vindex", help="a vindex of the model at level inference (else one is extracted to a temp dir)")
    ap.add_argument("--out", default=str(REPO / "data" / "edit_eval"))
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--facts", type=int, default=1000)
    ap.add_argument("--subset", type=int, default=100)
    ap.add_argument("--neighbours", type=int, default=5, help="neighbourhood prompts per fact")
    ap.add_argument("--real", type=int, default=250, help="at most this many real-fact prompts")
    ap.add_argument("-t", "--threads", type=int, default=2)
    a = ap.parse_args()
    if not os.access(a.larql, os.X_OK):
        die(f"{a.larql} is not an executable larql binary (build it first)")
    tmp = None
    vindex = a.vindex
    if not vindex:
        tmp = tempfile.TemporaryDirectory(prefix="edit_eval_")
        vindex = os.path.join(tmp.name, "model.vindex")
        print(f"extracting {a.model} to {vindex} ...", file=sys.stderr)
        r = subprocess.run([a.larql, "extract", a.model, "-o", vindex, "--level", "inference", "-t", str(a.threads)],
                           capture_output=True, text=True)
        if r.returncode != 0:
            die(f"larql extract failed: {r.stderr.strip()}")
    index = json.loads(Path(vindex, "index.json").read_text())
    model = Model(a.larql, vindex, a.threads)
    rng = random.Random(a.seed)

    # 1. Targets: keep those whose " " + target is one token.
    for rel in RELATIONS:
        keep = [t for t in rel["targets"] if model.first_token(t)[1] == 1]
        dropped = sorted(set(rel["targets"]) - set(keep))
        if dropped:
            print(f"  {rel['relation']}: targets of several tokens dropped: {dropped}", file=sys.stderr)
        if len(keep) < 4:
            die(f"{rel['relation']}: only {len(keep)} single-token targets")
        rel["single_targets"] = keep

    # 2. Neighbourhood pools: real subjects whose answer the base model gives top-1.
    pools: dict[str, list[dict]] = {}
    cand = [(rel["relation"], t.format(s=s), ans) for rel in RELATIONS for s, ans in rel["pairs"] for t in rel["neighbours"]]
    top = model.top1([p for _, p, _ in cand])
    for relation, p, ans in cand:
        got = answered(model, p, ans, top)
        if got is not None:
            pools.setdefault(relation, []).append({"prompt": p, "answer": got, "answer_id": model.first_token(got)[0]})
    for rel in RELATIONS:
        n = len(pools.get(rel["relation"], []))
        print(f"  {rel['relation']}: {n} neighbourhood prompts answered", file=sys.stderr)
        if n < a.neighbours:
            die(f"{rel['relation']}: only {n} neighbourhood prompts the model answers (need {a.neighbours})")

    # 3. Made-up facts, round-robin over the relations; a candidate is dropped when the base model
    # already answers its target on the canonical prompt or a paraphrase.
    used: set[str] = set()
    per_rel = [a.facts // len(RELATIONS) + (1 if i < a.facts % len(RELATIONS) else 0) for i in range(len(RELATIONS))]
    cands: list[list[dict]] = []
    for rel, n in zip(RELATIONS, per_rel):
        lst = []
        for _ in range(int(n * 1.2) + 5):
            ent = invent(rng, rel["kind"], used)
            tgt = rng.choice(rel["single_targets"])
            lst.append({"relation": rel["relation"], "entity": ent, "target": tgt,
                        "prompt": canonical(rel["relation"], ent),
                        "paraphrases": [t.format(s=ent) for t in rel["paraphrases"]]})
        cands.append(lst)
    top = model.top1([p for lst in cands for c in lst for p in [c["prompt"]] + c["paraphrases"]])
    kept: list[list[dict]] = []
    for rel, lst, n in zip(RELATIONS, cands, per_rel):
        ok = [c for c in lst if all(top[p][0] != model.first_token(c["target"])[0] for p in [c["prompt"]] + c["paraphrases"])]
        if len(ok) < n:
            die(f"{rel['relation']}: only {len(ok)} of {len(lst)} candidate facts are unknown to the model (need {n})")
        print(f"  {rel['relation']}: {len(lst) - len(ok)} of {len(lst)} candidates dropped (the model answered them)",
              file=sys.stderr)
        kept.append(ok[:n])
    facts = []
    for i in range(max(per_rel)):
        for r, lst in enumerate(kept):
            if i < len(lst):
                c = lst[i]
                tid, _, piece = model.first_token(c["target"])
                c["target_id"], c["target_piece"] = tid, piece
                c["neighbourhood"] = rng.sample(pools[c["relation"]], a.neighbours)
                c["id"] = f"{c['relation'].replace(' ', '-')}-{i:04d}"
                facts.append(c)

    # 4. Real facts the model answers, none among the neighbourhood prompts.
    in_pools = {n["prompt"] for pool in pools.values() for n in pool}
    real_c = [(p, ans) for p, ans in REAL if p not in in_pools]
    top = model.top1([p for p, _ in real_c])
    real = []
    for p, ans in real_c:
        got = answered(model, p, ans, top)
        if got is not None:
            real.append({"prompt": p, "answer": got, "answer_id": model.first_token(got)[0]})
    print(f"  real facts: {len(real)} of {len(real_c)} answered", file=sys.stderr)
    if len(real) < 200:
        die(f"only {len(real)} real-fact prompts are answered by the model (need 200)")
    real = real[:a.real]

    meta = {"type": "meta", "generator": "scripts/make_edit_eval.py", "seed": a.seed, "model": index.get("model", ""),
            "fingerprint": index.get("source", {}).get("fingerprint", ""),
            "relations": [r["relation"] for r in RELATIONS], "neighbours_per_fact": a.neighbours}
    tail = ([{"type": "real", **r} for r in real] + [{"type": "fluency", "prompt": p} for p in FLUENCY] +
            [{"type": "heldout", "text": HELDOUT}])
    order = ["type", "id", "relation", "entity", "target", "target_id", "target_piece", "prompt", "paraphrases",
             "neighbourhood"]

    def write(path: Path, fs: list[dict]) -> None:
        with open(path, "w", encoding="utf-8") as f:
            f.write(json.dumps({**meta, "facts": len(fs)}, ensure_ascii=False) + "\n")
            for c in fs:
                rec = {"type": "fact", **c}
                f.write(json.dumps({k: rec[k] for k in order}, ensure_ascii=False) + "\n")
            for r in tail:
                f.write(json.dumps(r, ensure_ascii=False) + "\n")
        print(f"wrote {path} ({len(fs)} facts, {len(real)} real-fact prompts)", file=sys.stderr)

    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    write(out / "full.jsonl", facts)
    write(out / f"subset{a.subset}.jsonl", facts[:a.subset])
    if tmp:
        tmp.cleanup()


if __name__ == "__main__":
    main()
